#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr const char* kPass = "simplify_arithmetic";

std::string model_text(int opset, const std::string& signature, const std::string& extra,
                       const std::string& body) {
  return "<ir_version: 8, opset_import: [\"\" : " + std::to_string(opset) + "]>\ng " + signature +
         (extra.empty() ? "" : " <" + extra + ">") + " {\n" + body + "\n}\n";
}

// Parses, runs the pass with the numeric check, and checks ONNX still accepts the model.
std::unique_ptr<ir::Model> simplify(const std::string& text, int expected_rewrites = 1) {
  return run_rewrite(kPass, text, rewrites(expected_rewrites));
}

// ---------------------------------------------------------------- constants pushed together

TEST(SimplifyArithmetic, PushesConstantsThroughAdd) {
  // c1 + c2 = {1.0 + 0.5, 2.0 - 4.0, 3.0 + 0.25}, exact in float. The constants the rewrite no
  // longer reads go with it (the rewriter erases them); so in the tests below.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y)
        <float[3] c1 = {1.0, 2.0, 3.0}, float[3] c2 = {0.5, -4.0, 0.25}> {
      t = Add (x, c2)
      y = Add (c1, t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) <float[3] sum = {1.5, -2.0, 3.25}> {
      y = Add (x, sum)
    }
  )",
                 rewrites(1));
}

TEST(SimplifyArithmetic, PushesIntegerConstantsThroughMulInAnyOrder) {
  const int32_t c1 = 3;
  const std::vector<int32_t> c2 = {1, -2, 5};
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int32[2,3] x) => (int32[2,3] y) <int32 c1 = {3}, int32[3] c2 = {1, -2, 5}> {
      t = Mul (c2, x)
      y = Mul (t, c1)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Mul"), 1);
  const ir::Node* mul = producer(*model, "y");
  ASSERT_TRUE(mul);
  EXPECT_EQ(mul->input(0)->name(), "x");
  EXPECT_EQ(mul->input(1)->initializer()->data_type(), onnx::TensorProto::INT32);
  std::vector<double> want;
  for (int32_t v : c2) want.push_back(c1 * v);
  expect_near(values_of(mul->input(1)), want);
}

TEST(SimplifyArithmetic, PushesConstantsThroughAChain) {
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) <float a = {1.5}, float[3] b = {1.0, 2.0, 3.0},
                                        float[1,3] c = {10.0, 20.0, 30.0}> {
      t1 = Add (x, a)
      t2 = Add (b, t1)
      y = Add (t2, c)
    }
  )",
                        2);
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Add"), 1);
  const ir::Node* add = producer(*model, "y");
  ASSERT_TRUE(add);
  EXPECT_EQ(add->input(0)->name(), "x");
  expect_near(values_of(add->input(1)), {1.5 + 1 + 10, 1.5 + 2 + 20, 1.5 + 3 + 30});
  EXPECT_EQ(add->input(1)->static_shape(), (std::vector<int64_t>{1, 3}));
}

TEST(SimplifyArithmetic, KeepsPushDownLookAlikes) {
  const std::string consts = "float[3] c1 = {1.0, 2.0, 3.0}, float[3] c2 = {0.5, -4.0, 0.25}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"intermediate_read_twice", model_text(13, "(float[2,3] x) => (float[2,3] y)", consts,
                                             "t = Add (x, c2)\n u = Add (c1, t)\n y = Add (u, t)")},
      {"intermediate_is_graph_output",
       model_text(13, "(float[2,3] x) => (float[2,3] y, float[2,3] t)", consts,
                  "t = Add (x, c2)\n y = Add (c1, t)")},
      {"combined_constant_grows",
       model_text(13, "(float[2,3] x) => (float[2,3] y)",
                  "float[2,1] c1 = {1.0, 2.0}, float[1,3] c2 = {0.5, -4.0, 0.25}",
                  "t = Add (x, c2)\n y = Add (c1, t)")},
      {"different_ops", model_text(13, "(float[2,3] x) => (float[2,3] y)", consts,
                                   "t = Sub (x, c2)\n y = Add (c1, t)")},
      {"add_of_mul", model_text(13, "(float[2,3] x) => (float[2,3] y)", consts,
                                "t = Mul (x, c2)\n y = Add (c1, t)")},
      {"outer_operand_not_constant", model_text(13, "(float[2,3] x, float[3] z) => (float[2,3] y)",
                                                consts, "t = Add (x, c2)\n y = Add (z, t)")},
      {"constant_overridable_by_input",
       model_text(13, "(float[2,3] x, float[3] c1) => (float[2,3] y)", consts,
                  "t = Add (x, c2)\n y = Add (c1, t)")},
  };
  // (Some cases have an input of unknown rank, which the evaluator cannot make up.)
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    expect_no_rewrite(kPass, text, compare_outputs(Outputs::kSameIfVerifiable));
  }
}

// ---------------------------------------------------------------- Sum and Concat

TEST(SimplifyArithmetic, CombinesConstantOperandsOfSum) {
  const std::vector<float> c1 = {1.0f, -2.0f, 0.5f}, c2 = {4.0f, 8.0f, 16.0f};
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[3] z) => (float[2,3] y)
        <float[3] c1 = {1.0, -2.0, 0.5}, float[3] c2 = {4.0, 8.0, 16.0}> {
      y = Sum (x, c1, z, c2)
    }
  )");
  ASSERT_TRUE(model);
  const ir::Node* sum = producer(*model, "y");
  ASSERT_TRUE(sum);
  ASSERT_EQ(sum->inputs().size(), 3u);
  EXPECT_EQ(sum->input(0)->name(), "x");
  EXPECT_EQ(sum->input(1)->name(), "z");
  std::vector<double> want;
  for (size_t i = 0; i < c1.size(); ++i) want.push_back(c1[i] + c2[i]);
  expect_near(values_of(sum->input(2)), want);
}

TEST(SimplifyArithmetic, MergesAdjacentConstantInputsOfConcat) {
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,1] x, float[2,3] z) => (float[2,8] y)
        <float[2,2] c1 = {1.0, 2.0, 3.0, 4.0}, float[2,1] c2 = {5.0, 6.0},
         float[2,1] c3 = {7.0, 8.0}> {
      y = Concat <axis = -1> (x, c1, c2, z, c3)
    }
  )");
  ASSERT_TRUE(model);
  const ir::Node* concat = producer(*model, "y");
  ASSERT_TRUE(concat);
  ASSERT_EQ(concat->inputs().size(), 4u);
  EXPECT_EQ(concat->input(0)->name(), "x");
  EXPECT_EQ(concat->input(2)->name(), "z");
  EXPECT_EQ(concat->input(3)->name(), "c3");
  // Row r of the merged constant is row r of c1 followed by row r of c2.
  const std::vector<std::vector<double>> c1 = {{1, 2}, {3, 4}}, c2 = {{5}, {6}};
  std::vector<double> want;
  for (size_t r = 0; r < 2; ++r) {
    want.insert(want.end(), c1[r].begin(), c1[r].end());
    want.insert(want.end(), c2[r].begin(), c2[r].end());
  }
  expect_near(values_of(concat->input(1)), want);
  EXPECT_EQ(concat->input(1)->static_shape(), (std::vector<int64_t>{2, 3}));
}

TEST(SimplifyArithmetic, KeepsSumAndConcatLookAlikes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"sum_one_constant", model_text(13, "(float[2,3] x, float[3] z) => (float[2,3] y)",
                                      "float[3] c1 = {1.0, 2.0, 3.0}", "y = Sum (x, c1, z)")},
      {"sum_constant_grows",
       model_text(13, "(float[2,3] x) => (float[2,3] y)",
                  "float[2,1] c1 = {1.0, 2.0}, float[1,3] c2 = {0.5, -4.0, 0.25}",
                  "y = Sum (x, c1, c2)")},
      {"concat_constants_not_adjacent",
       model_text(13, "(float[2,1] x) => (float[2,3] y)",
                  "float[2,1] c1 = {1.0, 2.0}, float[2,1] c2 = {3.0, 4.0}",
                  "y = Concat <axis = 1> (c1, x, c2)")},
  };
  // (Some cases have an input of unknown rank, which the evaluator cannot make up.)
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    expect_no_rewrite(kPass, text, compare_outputs(Outputs::kSameIfVerifiable));
  }
}

// ---------------------------------------------------------------- neutral elements

TEST(SimplifyArithmetic, RemovesNeutralElements) {
  struct Case {
    std::string name, x_type, extra, node;
  };
  const std::vector<Case> cases = {
      {"add_zero_scalar", "float[2,3]", "float z = {0.0}", "t = Add (x, z)"},
      {"zero_add_negative_zeros", "float[2,3]", "float[3] z = {-0.0, 0.0, -0.0}", "t = Add (z, x)"},
      {"sub_zero", "float[2,3]", "float[1] z = {0.0}", "t = Sub (x, z)"},
      {"mul_ones_row", "float[2,3]", "float[1,3] o = {1.0, 1.0, 1.0}", "t = Mul (x, o)"},
      {"ones_mul_full_shape", "float[2,3]", "float[2,3] o = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}",
       "t = Mul (o, x)"},
      {"div_one", "float[2,3]", "float o = {1.0}", "t = Div (x, o)"},
      {"int_div_one", "int64[2,3]", "int64 o = {1}", "t = Div (x, o)"},
      {"int_add_zero", "int32[2,3]", "int32[3] z = {0, 0, 0}", "t = Add (x, z)"},
      {"pow_int_exponent_one", "float[2,3]", "int64 e = {1}", "t = Pow (x, e)"},
      {"pow_float_exponent_one", "double[2,3]", "double e = {1.0}", "t = Pow (x, e)"},
      {"symbolic_dim_matches", "float[N,3]", "float[3] z = {0.0, 0.0, 0.0}", "t = Add (x, z)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = simplify(model_text(14, "(" + c.x_type + " x) => (" + c.x_type + " y)", c.extra,
                                     c.node + "\n y = Identity (t)"));
    ASSERT_TRUE(model);
    const ir::Node* id = producer(*model, "y");
    ASSERT_TRUE(id);
    EXPECT_EQ(id->input(0)->name(), "x");
    EXPECT_EQ(model->graph().find_local("t"), nullptr);
  }
}

TEST(SimplifyArithmetic, NeutralElementComputingAGraphOutputKeepsItsName) {
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) <float z = {0.0}> {
      r = Relu (x)
      y = Add (r, z)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Add"), 0);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y"}));
  const ir::Node* relu = producer(*model, "y");
  ASSERT_TRUE(relu);
  EXPECT_EQ(relu->op_type(), "Relu");
}

TEST(SimplifyArithmetic, RewritesZeroMinusXAndOneOverX) {
  struct Case {
    std::string name, x_type, extra, node, op;
  };
  const std::vector<Case> cases = {
      {"zero_minus_x", "float[2,3]", "float z = {0.0}", "t = Sub (z, x)", "Neg"},
      {"negative_zero_minus_x", "float[2,3]", "float[3] z = {-0.0, -0.0, -0.0}", "t = Sub (z, x)",
       "Neg"},
      {"int_zero_minus_x", "int32[2,3]", "int32 z = {0}", "t = Sub (z, x)", "Neg"},
      {"one_over_x", "float[2,3]", "float[1,1] o = {1.0}", "t = Div (o, x)", "Reciprocal"},
      {"one_over_x_double", "double[2,3]", "double o = {1.0}", "t = Div (o, x)", "Reciprocal"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = simplify(model_text(14, "(" + c.x_type + " x) => (" + c.x_type + " y)", c.extra,
                                     c.node + "\n y = Identity (t)"));
    ASSERT_TRUE(model);
    const ir::Node* unary = producer(*model, "t");
    ASSERT_TRUE(unary);
    EXPECT_EQ(unary->op_type(), c.op);
    EXPECT_EQ(input_names(*unary), (std::vector<std::string>{"x"}));
    EXPECT_EQ(count_ops(*model, "Sub") + count_ops(*model, "Div"), 0);
  }
}

TEST(SimplifyArithmetic, ReplacesIntegerMulByZeroWithZeros) {
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 14]>
    g (int32[2,3] x) => (int32[2,3] y) <int32[3] z = {0, 0, 0}> {
      t = Mul (x, z)
      y = Relu (t)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Mul"), 0);
  const ir::Value* t = model->graph().find_local("t");
  ASSERT_TRUE(t && t->initializer());
  EXPECT_EQ(t->initializer()->data_type(), onnx::TensorProto::INT32);
  EXPECT_EQ(t->static_shape(), (std::vector<int64_t>{2, 3}));
  expect_near(values_of(t), std::vector<double>(6, 0.0));
}

TEST(SimplifyArithmetic, KeepsNeutralAndAbsorbingLookAlikes) {
  struct Case {
    std::string name, x_type, y_type, extra, node;
  };
  const std::vector<Case> cases = {
      {"zero_broadcasts_x_up", "float[3]", "float[2,3]",
       "float[2,3] z = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0}", "t = Add (x, z)"},
      {"ones_add_a_rank", "float[3]", "float[1,3]", "float[1,3] o = {1.0, 1.0, 1.0}",
       "t = Mul (x, o)"},
      // M may be 1 at run time, and then z would broadcast x to [2,2].
      {"unknown_dim_may_grow", "float[2,M]", "float[2,2]", "float[2] z = {0.0, 0.0}",
       "t = Add (x, z)"},
      {"known_dim_one_grows", "float[2,1]", "float[2,3]", "float[3] z = {0.0, 0.0, 0.0}",
       "t = Add (x, z)"},
      {"not_all_zero", "float[2,3]", "float[2,3]", "float[3] z = {0.0, 0.0, 1.0}",
       "t = Add (x, z)"},
      {"mul_two", "float[2,3]", "float[2,3]", "float o = {2.0}", "t = Mul (x, o)"},
      // (-1 is a power of two, so div_by_power_of_two would make this a Mul; 3 keeps it a Div.)
      {"div_not_one", "float[2,3]", "float[2,3]", "float[3] o = {1.0, -1.0, 3.0}",
       "t = Div (x, o)"},
      {"pow_two", "float[2,3]", "float[2,3]", "float e = {2.0}", "t = Pow (x, e)"},
      {"one_pow_x", "float[2,3]", "float[2,3]", "float o = {1.0}", "t = Pow (o, x)"},
      // x + 1 keeps the divisor away from 0 for the numeric check.
      {"int_one_over_x", "int32[2,3]", "int32[2,3]", "int32 o = {1}",
       "p = Add (x, o)\n t = Div (o, p)"},
      {"unsigned_zero_minus_x", "uint8[2,3]", "uint8[2,3]", "uint8 z = {0}", "t = Sub (z, x)"},
      {"float_mul_zero", "float[2,3]", "float[2,3]", "float z = {0.0}", "t = Mul (x, z)"},
      {"int_mul_zero_dynamic_shape", "int32[N,3]", "int32[N,3]", "int32 z = {0}", "t = Mul (x, z)"},
      {"zero_overridable_by_input", "float[2,3]", "float[2,3]", "float z = {0.0}",
       "t = Add (x, z)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string inputs =
        "(" + c.x_type + " x" + (c.name == "zero_overridable_by_input" ? ", float z" : "") + ")";
    expect_no_rewrite(kPass, model_text(14, inputs + " => (" + c.y_type + " y)", c.extra,
                                        c.node + "\n y = Identity (t)"));
  }
  SCOPED_TRACE("graph_output_of_graph_input");
  expect_no_rewrite(kPass, model_text(14, "(float[2,3] x) => (float[2,3] y)", "float z = {0.0}",
                                      "y = Add (x, z)"));
}

// ---------------------------------------------------------------- inverse pairs

TEST(SimplifyArithmetic, RemovesNegNegAndNotNot) {
  struct Case {
    std::string name, type, op;
  };
  const std::vector<Case> cases = {
      {"neg_float", "float[2,3]", "Neg"},
      {"neg_int", "int32[2,3]", "Neg"},
      {"not_bool", "bool[2,3]", "Not"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto model =
        simplify(model_text(13, "(" + c.type + " x) => (" + c.type + " y)", "",
                            "t = " + c.op + " (x)\n u = " + c.op + " (t)\n y = Identity (u)"));
    ASSERT_TRUE(model);
    const ir::Node* id = producer(*model, "y");
    ASSERT_TRUE(id);
    EXPECT_EQ(id->input(0)->name(), "x");
  }
}

TEST(SimplifyArithmetic, InversePairKeepsAnIntermediateOthersRead) {
  auto model = expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) {
      t = Neg (x)
      u = Neg (t)
      y = Add (u, t)
    }
  )",
                              R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) {
      t = Neg (x)
      y = Add (x, t)
    }
  )",
                              rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"x", "t"}));
}

TEST(SimplifyArithmetic, KeepsInversePairLookAlikes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"reciprocal_twice", model_text(13, "(float[2,3] x) => (float[2,3] y)", "",
                                      "t = Reciprocal (x)\n u = Reciprocal (t)\n y = Relu (u)")},
      {"neg_of_abs", model_text(13, "(float[2,3] x) => (float[2,3] y)", "",
                                "t = Abs (x)\n u = Neg (t)\n y = Relu (u)")},
      {"graph_output_of_graph_input",
       model_text(13, "(float[2,3] x) => (float[2,3] y)", "", "t = Neg (x)\n y = Neg (t)")},
  };
  // (Some cases have an input of unknown rank, which the evaluator cannot make up.)
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    expect_no_rewrite(kPass, text, compare_outputs(Outputs::kSameIfVerifiable));
  }
}

// ---------------------------------------------------------------- Transpose and Reshape chains

TEST(SimplifyArithmetic, RemovesTransposesThatCancel) {
  // [1,2,0] then [2,0,1]: out axis j is x axis p1[p2[j]] = (0, 1, 2).
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[2,3,4] y) {
      t = Transpose <perm = [1, 2, 0]> (x)
      u = Transpose <perm = [2, 0, 1]> (t)
      y = Relu (u)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"x"}));
}

TEST(SimplifyArithmetic, RemovesTwoDefaultTransposes) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[2,3,4] y) {
      t = Transpose (x)
      u = Transpose (t)
      y = Relu (u)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[2,3,4] y) {
      t = Transpose (x)
      y = Relu (x)
    }
  )",
                 rewrites(1));
}

TEST(SimplifyArithmetic, ComposesTransposesKeepingAnIntermediateOthersRead) {
  // x: (2,3,4) -> [1,0,2] -> (3,2,4) -> [0,2,1] -> (3,4,2), which is x under [1,2,0].
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[3,4,2] y, float[3,2,4] w) {
      t = Transpose <perm = [1, 0, 2]> (x)
      y = Transpose <perm = [0, 2, 1]> (t)
      w = Relu (t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[3,4,2] y, float[3,2,4] w) {
      t = Transpose <perm = [1, 0, 2]> (x)
      y = Transpose <perm = [1, 2, 0]> (x)
      w = Relu (t)
    }
  )",
                 rewrites(1));
}

TEST(SimplifyArithmetic, MergesReshapes) {
  struct Case {
    std::string name, s1, s2;
  };
  const std::vector<Case> cases = {
      {"plain", "int64[1] s1 = {6}", "int64[2] s2 = {3, 2}"},
      {"minus_one_and_inner_zero", "int64[2] s1 = {0, -1}", "int64[2] s2 = {-1, 2}"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = simplify(model_text(14, "(float[2,3] x) => (float[3,2] y)", c.s1 + ", " + c.s2,
                                     "t = Reshape (x, s1)\n y = Reshape (t, s2)"));
    ASSERT_TRUE(model);
    EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"x", "s2"}));
  }
}

TEST(SimplifyArithmetic, KeepsTransposeAndReshapeLookAlikes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"default_perm_unknown_rank",
       model_text(13, "(float x) => (float[2,3] y)", "",
                  "r = Identity (x)\n t = Transpose (r)\n u = Transpose <perm = [1, 0]> (t)\n"
                  " y = Relu (u)")},
      {"transpose_of_relu", model_text(13, "(float[2,3] x) => (float[3,2] y)", "",
                                       "t = Relu (x)\n y = Transpose <perm = [1, 0]> (t)")},
      {"reshape_zero_copies_intermediate_dim",
       model_text(14, "(float[N,6] x) => (float[M,3] y)",
                  "int64[2] s1 = {-1, 3}, int64[2] s2 = {0, 3}",
                  "t = Reshape (x, s1)\n y = Reshape (t, s2)")},
      {"reshape_dynamic_target",
       model_text(14, "(float[N,6] x, float[K,3] z) => (float[K,3] y)", "int64[1] s1 = {-1}",
                  "t = Reshape (x, s1)\n s2 = Shape (z)\n y = Reshape (t, s2)")},
  };
  // (Some cases have an input of unknown rank, which the evaluator cannot make up.)
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    expect_no_rewrite(kPass, text, compare_outputs(Outputs::kSameIfVerifiable));
  }
}

// ---------------------------------------------------------------- Squeeze / Unsqueeze

TEST(SimplifyArithmetic, MergesUnsqueezeChains) {
  // (2,3) -> axes [0] -> (1,2,3) -> axes [2] -> (1,2,1,3) == (2,3) with axes [0, 2].
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[1,2,1,3] y) <int64[1] a1 = {0}, int64[1] a2 = {-2}> {
      t = Unsqueeze (x, a1)
      y = Unsqueeze (t, a2)
    }
  )");
  ASSERT_TRUE(model);
  const ir::Node* u = producer(*model, "y");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->input(0)->name(), "x");
  expect_near(values_of(u->input(1)), {0, 2});
}

TEST(SimplifyArithmetic, MergesSqueezeChainsWithAxesAttributes) {
  // (1,2,1,3) -> axes [0] -> (2,1,3) -> axes [1] -> (2,3) == (1,2,1,3) with axes [0, 2].
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 11]>
    g (float[1,2,1,3] x) => (float[2,3] y) {
      t = Squeeze <axes = [0]> (x)
      y = Squeeze <axes = [1]> (t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 11]>
    g (float[1,2,1,3] x) => (float[2,3] y) {
      y = Squeeze <axes = [0, 2]> (x)
    }
  )",
                 rewrites(1));
}

TEST(SimplifyArithmetic, RemovesSqueezeOfUnsqueezeOfTheSameAxes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"unsqueeze_then_squeeze",
       model_text(13, "(float[2,3] x) => (float[2,3] y)",
                  "int64[2] a = {1, -1}, int64[2] b = {3, 1}",
                  "t = Unsqueeze (x, a)\n u = Squeeze (t, b)\n y = Relu (u)")},
      {"squeeze_then_unsqueeze",
       model_text(13, "(float[2,1,3] x) => (float[2,1,3] y)", "int64[1] a = {-2}, int64[1] b = {1}",
                  "t = Squeeze (x, a)\n u = Unsqueeze (t, b)\n y = Relu (u)")},
      {"opset11_attributes", model_text(11, "(float[2,3] x) => (float[2,3] y)", "",
                                        "t = Unsqueeze <axes = [0]> (x)\n"
                                        " u = Squeeze <axes = [0]> (t)\n y = Relu (u)")},
  };
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    auto model = simplify(text);
    ASSERT_TRUE(model);
    EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"x"}));
  }
}

TEST(SimplifyArithmetic, KeepsSqueezeLookAlikes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"different_axes",
       model_text(13, "(float[1,N] x) => (float[1,N] y)", "int64[1] a = {0}, int64[1] b = {1}",
                  "t = Unsqueeze (x, a)\n y = Squeeze (t, b)")},
      {"squeeze_without_axes",
       model_text(13, "(float[1,N,1] x) => (float[N] y)", "int64[1] a = {0}",
                  "t = Squeeze (x, a)\n y = Squeeze (t)")},
      {"negative_axes_unknown_rank",
       model_text(13, "(float x) => (float[2,1,1,M] y)", "int64[1] a = {-2}, int64[1] b = {-2}",
                  "r = Identity (x)\n t = Unsqueeze (r, a)\n y = Unsqueeze (t, b)")},
  };
  // (Some cases have an input of unknown rank, which the evaluator cannot make up.)
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    expect_no_rewrite(kPass, text, compare_outputs(Outputs::kSameIfVerifiable));
  }
}

// ---------------------------------------------------------------- Cast chains

TEST(SimplifyArithmetic, MergesLosslessCasts) {
  struct Case {
    std::string name, x_type;
    int t1, t2;
    std::string y_type;
  };
  // 1 float, 2 uint8, 3 int8, 6 int32, 7 int64, 10 float16, 11 double.
  const std::vector<Case> cases = {
      {"int32_int64_float", "int32[2,3]", 7, 1, "float[2,3]"},
      {"uint8_float16_int32", "uint8[2,3]", 10, 6, "int32[2,3]"},
      {"int8_int32_double", "int8[2,3]", 6, 11, "double[2,3]"},
      {"float_double_int64", "float[2,3]", 11, 7, "int64[2,3]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = simplify(model_text(13, "(" + c.x_type + " x) => (" + c.y_type + " y)", "",
                                     "t = Cast <to = " + std::to_string(c.t1) +
                                         "> (x)\n u = Cast <to = " + std::to_string(c.t2) +
                                         "> (t)\n y = Identity (u)"));
    ASSERT_TRUE(model);
    const ir::Node* cast = producer(*model, "u");
    ASSERT_TRUE(cast);
    EXPECT_EQ(input_names(*cast), (std::vector<std::string>{"x"}));
    EXPECT_EQ(cast->attr_int("to", 0), c.t2);
  }
}

TEST(SimplifyArithmetic, RemovesCastRoundTripThroughAWiderType) {
  auto model = simplify(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) {
      t = Cast <to = 11> (x)
      u = Cast <to = 1> (t)
      y = Relu (u)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"x"}));
}

TEST(SimplifyArithmetic, KeepsLossyCasts) {
  struct Case {
    std::string name, x_type;
    int t1, t2;
    std::string y_type;
  };
  const std::vector<Case> cases = {
      {"float_int32_float", "float[2,3]", 6, 1, "float[2,3]"},
      {"double_float_double", "double[2,3]", 1, 11, "double[2,3]"},
      {"int64_int32_int64", "int64[2,3]", 6, 7, "int64[2,3]"},
      {"int32_float_int64", "int32[2,3]", 1, 7, "int64[2,3]"},
      {"float_float16_float", "float[2,3]", 10, 1, "float[2,3]"},
      {"int32_uint32_int64", "int32[2,3]", 12, 7, "int64[2,3]"},
      {"float_bool_float", "float[2,3]", 9, 1, "float[2,3]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_no_rewrite(kPass, model_text(13, "(" + c.x_type + " x) => (" + c.y_type + " y)", "",
                                        "t = Cast <to = " + std::to_string(c.t1) +
                                            "> (x)\n u = Cast <to = " + std::to_string(c.t2) +
                                            "> (t)\n y = Identity (u)"));
  }
}

// ---------------------------------------------------------------- scopes

TEST(SimplifyArithmetic, SimplifiesInsideSubgraphs) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) <float z = {0.0}> {
      y = If (cond) <
        then_branch = then_g () => (float[2] a) {
          t = Neg (x)
          u = Neg (t)
          a = Relu (u)
        },
        else_branch = else_g () => (float[2] b) {
          s = Add (x, z)
          b = Relu (s)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) {
      y = If (cond) <
        then_branch = then_g () => (float[2] a) {
          t = Neg (x)
          a = Relu (x)
        },
        else_branch = else_g () => (float[2] b) {
          b = Relu (x)
        }>
    }
  )",
                 rewrites(2));
}

TEST(SimplifyArithmetic, MakesConstantNodesWhereInitializersAreNotAllowed) {
  // IR 3 would need every new initializer to be a graph input too.
  auto model = simplify(R"(
    <ir_version: 3, opset_import: ["" : 9]>
    g (float[2,3] x) => (float[2,3] y) {
      c1 = Constant <value = float[3] {1.0, 2.0, 3.0}> ()
      c2 = Constant <value = float[3] {0.5, 0.5, 0.5}> ()
      t = Add (x, c2)
      y = Add (t, c1)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Add"), 1);
  EXPECT_TRUE(model->graph().initializers().empty());
  const ir::Node* add = producer(*model, "y");
  ASSERT_TRUE(add);
  EXPECT_EQ(add->input(0)->name(), "x");
  const ir::Node* c = add->input(1)->producer();
  ASSERT_TRUE(c && c->op_type() == "Constant");
  auto values = ir::read_doubles(c->attr("value")->t());
  ASSERT_TRUE(values);
  expect_near(*values, {1.5, 2.5, 3.5});
}

TEST(SimplifyArithmetic, SimplifiesFunctionBodies) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y) {
      y = local.F (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a) => (b) {
      c1 = Constant <value = float[1] {2.0}> ()
      c2 = Constant <value = float[1] {3.0}> ()
      t = Mul (a, c1)
      b = Mul (c2, t)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator does not run local functions.
  auto result = run_pass(*model, kPass);
  EXPECT_EQ(result.rewrites, 1);
  const ir::Graph& body = *model->functions()[0].body;
  const ir::Value* b = body.find_local("b");
  ASSERT_TRUE(b && b->producer());
  const ir::Node* mul = b->producer();
  EXPECT_EQ(mul->input(0)->name(), "a");
  const ir::Node* c = mul->input(1)->producer();
  ASSERT_TRUE(c && c->op_type() == "Constant");
  auto values = ir::read_doubles(c->attr("value")->t());
  ASSERT_TRUE(values);
  expect_near(*values, {6.0});
  auto reloaded = ir::Model::from_proto(model->to_proto());
  EXPECT_TRUE(reloaded.ok()) << reloaded.status();
}

TEST(SimplifyArithmetic, LeavesOtherDomainsAlone) {
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2] x) => (float[2] y) <float z = {0.0}> {
      t = custom.Add (x, z)
      y = custom.Neg (t)
    }
  )",
                    compare_outputs(Outputs::kSameIfVerifiable));  // no custom-domain kernels
}

TEST(SimplifyArithmetic, ReluNextToANonNegativeClip) {
  // Clip(Relu(x), 0, 6) is Clip(x, 0, 6) (Relu6 after a Relu); Relu(Clip(x, 1, 4)) is the Clip.
  // In a branch, with Constant-node bounds, and at opset 9 with attribute bounds.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[2,3] x) => (float[2,3] y, float[2,3] z, float[2,3] w)
      <float lo = {0.0}, float hi = {6.0}, float one = {1.0}, float four = {4.0}> {
      r = Relu (x)
      y = Clip (r, lo, hi)
      k = Clip (x, one, four)
      z = Relu (k)
      w = If (c) <
        then_branch = then_g () => (float[2,3] a) {
          zero = Constant <value = float {0.5}> ()
          r2 = Relu (x)
          a = Clip (r2, zero)
        },
        else_branch = else_g () => (float[2,3] b) {
          b = Relu (x)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[2,3] x) => (float[2,3] y, float[2,3] z, float[2,3] w)
      <float lo = {0.0}, float hi = {6.0}, float one = {1.0}, float four = {4.0}> {
      y = Clip (x, lo, hi)
      z = Clip (x, one, four)
      w = If (c) <
        then_branch = then_g () => (float[2,3] a) {
          zero = Constant <value = float {0.5}> ()
          a = Clip (x, zero)
        },
        else_branch = else_g () => (float[2,3] b) {
          b = Relu (x)
        }>
    }
  )",
                 rewrites(3));
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 9]>
    g (float[2,3] x) => (float[2,3] y) {
      r = Relu (x)
      y = Clip <min = 0.0, max = 6.0> (r)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 9]>
    g (float[2,3] x) => (float[2,3] y) {
      y = Clip <min = 0.0, max = 6.0> (x)
    }
  )",
                 rewrites(1));
}

TEST(SimplifyArithmetic, MergesClipChains) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y, float[2,3] z)
      <float a = {-1.0}, float b = {6.0}, float c = {0.0}, float d = {3.0}> {
      t = Clip (x, a, b)
      y = Clip (t, c, d)
      u = Clip (x, c, b)
      z = Clip (u, a, d)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y, float[2,3] z)
      <float c = {0.0}, float d = {3.0}> {
      y = Clip (x, c, d)
      z = Clip (x, c, d)
    }
  )",
                 rewrites(2));
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 9]>
    g (float[2,3] x) => (float[2,3] y) {
      t = Clip <min = -1.0> (x)
      y = Clip <min = 0.0, max = 6.0> (t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 9]>
    g (float[2,3] x) => (float[2,3] y) {
      y = Clip <min = 0.0, max = 6.0> (x)
    }
  )",
                 rewrites(1));
}

TEST(SimplifyArithmetic, KeepsClipLookAlikes) {
  const char* models[] = {
      // A negative lower bound: Relu matters.
      R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) <float lo = {-1.0}, float hi = {6.0}> {
      r = Relu (x)
      y = Clip (r, lo, hi)
    }
  )",
      R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) <float lo = {-1.0}> {
      k = Clip (x, lo)
      y = Relu (k)
    }
  )",
      // No lower bound at all.
      R"(
    <ir_version: 8, opset_import: ["" : 9]>
    g (float[2,3] x) => (float[2,3] y) {
      k = Clip <max = 6.0> (x)
      y = Relu (k)
    }
  )",
      // A runtime bound, a Relu read twice.
      R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float m) => (float[2,3] z, float[2,3] w, float[2,3] r) <float hi = {6.0}> {
      j = Clip (x, m, hi)
      z = Relu (j)
      r = Relu (x)
      w = Clip (r, m)
    }
  )",
      // Disjoint ranges: the chain's result is the outer bound, not a Clip of x.
      R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y)
      <float a = {0.0}, float b = {1.0}, float c = {2.0}, float d = {3.0}> {
      t = Clip (x, a, b)
      y = Clip (t, c, d)
    }
  )"};
  for (const char* text : models) expect_no_rewrite(kPass, text);
}

TEST(SimplifyArithmetic, CollapsesShapeOpChainsWithAKnownShape) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[2,3,4] x, float[6] v) => (float[2,12] y, float[2,3] z) {
      ax = Constant <value = int64[1] {0}> ()
      u = Unsqueeze (x, ax)
      y = Flatten <axis = 2> (u)
      z = If (c) <
        then_branch = then_g () => (float[2,3] a) {
          s = Constant <value = int64[3] {1, 2, 3}> ()
          r = Reshape (v, s)
          a = Squeeze (r, ax)
        },
        else_branch = else_g () => (float[2,3] b) {
          s2 = Constant <value = int64[2] {2, 3}> ()
          b = Reshape (v, s2)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[2,3,4] x, float[6] v) => (float[2,12] y, float[2,3] z)
      <int64[2] t1 = {2, 12}> {
      y = Reshape (x, t1)
      z = If (c) <
        then_branch = then_g () => (float[2,3] a) <int64[2] t2 = {2, 3}> {
          a = Reshape (v, t2)
        },
        else_branch = else_g () => (float[2,3] b) {
          s2 = Constant <value = int64[2] {2, 3}> ()
          b = Reshape (v, s2)
        }>
    }
  )",
                 rewrites(2));
  // A symbolic dim, an intermediate read twice, a zero dim: unchanged.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,3,4] x, float[2,3,4] w, float[0,3] e) => (float[N,12] y, float[2,12] z,
                                                       float[1,2,3,4] k, float[0,3] f) {
      ax = Constant <value = int64[1] {0}> ()
      u = Unsqueeze (x, ax)
      y = Flatten <axis = 2> (u)
      k = Unsqueeze (w, ax)
      z = Flatten <axis = 2> (k)
      g1 = Unsqueeze (e, ax)
      f = Flatten <axis = 2> (g1)
    }
  )");
}

TEST(SimplifyArithmetic, DivisionByAPowerOfTwoBecomesAMultiplication) {
  // Attention's 1 / sqrt(64), a per-channel [0.5, -4], in a branch too.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[2,2] x, double[2] d) => (float[2,2] y, double[2] z, float[2,2] w)
      <float eight = {8.0}, double[2] p = {0.5, -4.0}> {
      y = Div (x, eight)
      z = Div (d, p)
      w = If (c) <
        then_branch = then_g () => (float[2,2] a) {
          a = Div (x, eight)
        },
        else_branch = else_g () => (float[2,2] b) {
          b = Relu (x)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[2,2] x, double[2] d) => (float[2,2] y, double[2] z, float[2,2] w)
      <float r1 = {0.125}, double[2] r2 = {2.0, -0.25}> {
      y = Mul (x, r1)
      z = Mul (d, r2)
      w = If (c) <
        then_branch = then_g () => (float[2,2] a) <float r3 = {0.125}> {
          a = Mul (x, r3)
        },
        else_branch = else_g () => (float[2,2] b) {
          b = Relu (x)
        }>
    }
  )",
                 rewrites(3));
  // Not powers of two (6, 3, 0), a reciprocal below float's normals (2^127 -> 2^-127), an
  // integer division, a constant numerator: unchanged.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, int32[2] i) => (float[2] a, float[2] b, float[2] e, float[2] f, int32[2] g,
                                   float[2] h)
      <float six = {6.0}, float[2] mixed = {2.0, 3.0}, float zero = {0.0},
       float huge = {1.7014118e38}, int32 four = {4}, float[2] num = {1.0, 2.0}> {
      a = Div (x, six)
      b = Div (x, mixed)
      e = Div (x, zero)
      f = Div (x, huge)
      g = Div (i, four)
      h = Div (num, x)
    }
  )");
}

TEST(SimplifyArithmetic, MultiplicationByAReciprocalBecomesADivision) {
  // 1 / x becomes Reciprocal (neutral_element), then y * Reciprocal(x) a Div; either operand
  // order, in a function body too (x + 2 keeps the divisor away from 0 for the numeric check).
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2,3] x, float[3] y) => (float[2,3] a, float[2,3] b) <float one = {1.0}, float two = {2.0}> {
      p = Add (x, two)
      r = Div (one, p)
      a = Mul (y, r)
      q = Reciprocal (p)
      b = local.f (q, x)
    }
    <domain: "local", opset_import: ["" : 13]>
    f (s, t) => (u) {
      v = Reciprocal (s)
      u = Mul (v, t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2,3] x, float[3] y) => (float[2,3] a, float[2,3] b) <float two = {2.0}> {
      p = Add (x, two)
      a = Div (y, p)
      q = Reciprocal (p)
      b = local.f (q, x)
    }
    <domain: "local", opset_import: ["" : 13]>
    f (s, t) => (u) {
      u = Div (t, s)
    }
  )",
                 rewrites(3));
  // A reciprocal also read as a graph output, and a Mul of a Div by a non-constant numerator:
  // unchanged.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] y, float[2] z) => (float[2] b, float[2] r, float[2] c) {
      r = Reciprocal (x)
      b = Mul (r, y)
      d = Div (z, x)
      c = Mul (d, y)
    }
  )");
}

}  // namespace
}  // namespace graft::testing
