// libFuzzer target: a saved JSON report as `graft report` reads it (common/report.h:
// parse_saved_report, then render_html). Reports travel through registries and artefact stores,
// so the text is hostile, and the page it becomes is opened in a browser.
//
// Besides the sanitizers, it checks what the page's safety rests on: the template around the
// embedded report is intact, the embedded JSON is printable ASCII with no '<', '>' or '&' (so no
// string can end the script element or spell markup), it parses back as JSON, and, where every
// string of the report is valid UTF-8, back to the same report. Refusals say why.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/report.h"
#include "fuzz/fuzz_check.h"

using graft::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string error;
  std::optional<nlohmann::json> report = graft::report::parse_saved_report(text, &error);
  if (!report) {
    if (error.empty()) fail("a refusal without a reason");
    return 0;
  }
  if (!report->is_object()) fail("accepted a report that is not an object");

  // The template around the report: what the pages of {} and {"k":1} share, less their braces.
  static const std::string kA = graft::report::render_html(nlohmann::json::object());
  static const std::string kB = graft::report::render_html(nlohmann::json{{"k", 1}});
  static const size_t kHeadSize = [] {
    size_t n = 0;
    while (n < kA.size() && n < kB.size() && kA[n] == kB[n]) ++n;
    return n - 1;  // the report's '{'
  }();
  static const size_t kTailSize = [] {
    size_t n = 0;
    while (n < kA.size() && n < kB.size() && kA[kA.size() - 1 - n] == kB[kB.size() - 1 - n]) ++n;
    return n - 1;  // the report's '}'
  }();
  static const std::string_view kHead = std::string_view(kA).substr(0, kHeadSize);
  static const std::string_view kTail = std::string_view(kA).substr(kA.size() - kTailSize);
  if (kHeadSize + kTailSize + 2 != kA.size()) fail("the template holds no single report");

  const std::string page = graft::report::render_html(*report);
  if (page.size() < kHead.size() + kTail.size() || page.compare(0, kHead.size(), kHead) != 0 ||
      page.compare(page.size() - kTail.size(), kTail.size(), kTail) != 0)
    fail("the template around the report changed");
  const std::string_view embedded =
      std::string_view(page).substr(kHead.size(), page.size() - kHead.size() - kTail.size());
  for (char c : embedded) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || c == '<' || c == '>' || c == '&')
      fail("the embedded report holds a byte that could end the script or spell markup",
           std::to_string(u));
  }
  nlohmann::json back = nlohmann::json::parse(embedded, nullptr, /*allow_exceptions=*/false);
  if (back.is_discarded()) fail("the embedded report is not JSON");
  bool utf8 = true;
  try {
    (void)report->dump();  // throws on invalid UTF-8, which the page shows as U+FFFD
  } catch (const nlohmann::json::type_error&) {
    utf8 = false;
  }
  if (utf8 && back != *report) fail("the embedded report reads back differently");
  return 0;
}
