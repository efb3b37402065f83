// The headers nearly every test includes, compiled once per build as a precompiled header
// (tests/CMakeLists.txt: graft_test_pch) and reused by every test executable. Parsing them was
// about a fifth of a test file's compile time; each test still includes what it uses.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/eval/verify.h"
#include "core/ir/model.h"
#include "core/ir/tensor.h"
#include "core/passes/registry.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"
