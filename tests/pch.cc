// Hosts the tests' precompiled header (tests/pch.h, tests/CMakeLists.txt); compiles to nothing.
