# Sanitizer and fuzzing instrumentation for the whole build (scripts/sanitize.sh, scripts/fuzz.sh).
#
# One ASan+UBSan build serves both the sanitized test suite and the fuzz targets: with
# GRAFT_BUILD_FUZZ every object is also compiled with libFuzzer's coverage instrumentation
# (-fsanitize=fuzzer-no-link). Its hooks cost the tests little and the sanitizer runtime provides
# empty defaults for them, so tests and graftd link normally; only the fuzz executables link
# libFuzzer itself (fuzz/CMakeLists.txt).
if(GRAFT_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "GRAFT_BUILD_FUZZ needs clang for libFuzzer: "
      "configure with -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(GRAFT_SANITIZE STREQUAL "")
    # Fuzzing without ASan+UBSan finds only crashes, not the memory errors behind them.
    set(GRAFT_SANITIZE "address,undefined" CACHE STRING
      "Sanitizers for every target (clang -fsanitize= list: address,undefined or thread)" FORCE)
  elseif(GRAFT_SANITIZE MATCHES "thread|memory")
    message(FATAL_ERROR "GRAFT_BUILD_FUZZ works with address,undefined, not ${GRAFT_SANITIZE}")
  endif()
endif()

if(NOT GRAFT_SANITIZE STREQUAL "")
  # Any report fails the run (no recovery), and stacks stay readable.
  set(graft_sanitizer_flags -fsanitize=${GRAFT_SANITIZE} -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
  add_compile_options(${graft_sanitizer_flags})
  add_link_options(${graft_sanitizer_flags})
endif()
if(GRAFT_BUILD_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
