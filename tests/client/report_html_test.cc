// The HTML report's renderer and the model profile it shows (common/report.h); the page itself
// is checked in a browser by tests/report/page_test.py.
#include <limits>

#include <nlohmann/json.hpp>

#include "common/report.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using report::ModelProfile;

// The JSON between the report element's tags.
std::string embedded(const std::string& page) {
  const std::string open = "<script id=\"graft-report\" type=\"application/json\">";
  size_t from = page.find(open);
  if (from == std::string::npos) return "";
  from += open.size();
  return page.substr(from, page.find("</script>", from) - from);
}

TEST(ReportHtml, EmbedsTheReportSoNoStringCanEndItsElement) {
  const std::string hostile = "</script><script>alert(1)</script><!-- & \xe2\x80\xa8 \xe2\x80\xa9";
  nlohmann::json report = {{"input", hostile}, {"passes", {{{"name", "<b>x</b>"}}}}};
  const std::string page = report::render_html(report);
  EXPECT_EQ(page.find("@GRAFT_REPORT_JSON@"), std::string::npos);
  const std::string json = embedded(page);
  ASSERT_FALSE(json.empty());
  for (const char* banned : {"<", ">", "&", "\xe2\x80\xa8", "\xe2\x80\xa9"})
    EXPECT_EQ(json.find(banned), std::string::npos) << banned;
  EXPECT_EQ(nlohmann::json::parse(json), report);  // the escapes decode to the same strings
  // One script runs: the page's own (the report is data).
  size_t scripts = 0;
  for (size_t at = page.find("<script"); at != std::string::npos; at = page.find("<script", at + 1))
    ++scripts;
  EXPECT_EQ(scripts, 2u);
}

TEST(ReportHtml, InvalidUtf8FromAModelBecomesReplacementCharacters) {
  nlohmann::json report = {{"input", std::string("bad\xff\xfe name")}};
  const std::string json = embedded(report::render_html(report));
  EXPECT_EQ(nlohmann::json::parse(json)["input"], "bad\xef\xbf\xbd\xef\xbf\xbd name");
}

// Sizes for a person, up to the largest estimate: a saturated one (the memory estimate of
// hostile dims) is a lower bound, not a number of GiB.
TEST(ReportText, HumanBytesUpToASaturatedEstimate) {
  EXPECT_EQ(report::human_bytes(0), "0 B");
  EXPECT_EQ(report::human_bytes(1023), "1023 B");
  EXPECT_EQ(report::human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(report::human_bytes(uint64_t{5} << 20), "5.00 MiB");
  EXPECT_EQ(report::human_bytes(uint64_t{3} << 40), "3.00 TiB");
  EXPECT_EQ(report::human_bytes(uint64_t{15} << 60), "15.00 EiB");
  EXPECT_EQ(report::human_bytes(std::numeric_limits<uint64_t>::max()), "at least 16 EiB");
  EXPECT_EQ(report::human_bytes(std::numeric_limits<uint64_t>::max() - 1), "16.00 EiB");
}

TEST(ReportProfile, CountsOpsListsPortsAndFollowsTheMemoryEstimate) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "com.microsoft" : 1]>
    g (float[N,1000] x, float[1000] w) => (float[N,1000] y) {
      a = Relu (x)
      b = Add (a, w)
      c = Relu (b)
      y = com.microsoft.FastGelu (c)
    }
  )");
  ASSERT_TRUE(model);
  const DimBindings dims{{"N", 4}};
  const ModelProfile p = report::profile_model(*model, SizeRule{&dims, 1});
  EXPECT_EQ(p.ops, (std::map<std::string, int64_t>{
                       {"Add", 1}, {"Relu", 2}, {"com.microsoft:FastGelu", 1}}));
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.inputs[0].name, "x");
  EXPECT_EQ(p.inputs[0].type, "float");
  EXPECT_EQ(p.inputs[0].dims, "[N,1000]");
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].name, "y");
  EXPECT_EQ(p.nodes, 4u);
  ASSERT_EQ(p.memory.size(), 4u);
  // Each point is the bytes in use at a node; their largest is the estimate's peak.
  const MemoryStats stats = estimate_memory(*model, dims, 1);
  EXPECT_EQ(*std::max_element(p.memory.begin(), p.memory.end()), stats.peak_activation_bytes);
  EXPECT_EQ(p.memory[0], 4u * 1000 * 4 * 2 + 4000);  // x and w live, a made
}

TEST(ReportProfile, ALongScheduleIsSampledByItsLargestValues) {
  std::string body;
  std::string prev = "x";
  for (int i = 0; i < 1000; ++i) {
    std::string next = "v" + std::to_string(i);
    body += next + " = Relu (" + prev + ")\n";
    prev = next;
  }
  auto model =
      parse_text("<ir_version: 8, opset_import: [\"\" : 13]>\ng (float[10] x) => (float[10] " +
                 prev + ") {\n" + body + "}\n");
  ASSERT_TRUE(model);
  const ModelProfile p = report::profile_model(*model, SizeRule{});
  EXPECT_EQ(p.nodes, 1000u);
  ASSERT_EQ(p.memory.size(), report::kProfilePoints);
  for (uint64_t b : p.memory) EXPECT_EQ(b, 80u);  // an input and an output of 40 bytes each
}

}  // namespace
}  // namespace graft::testing
