// `mgm leak`: the sentence for people that explains a leak report. The library's analysis returns
// facts (a verdict, the reason it took, the numbers and the thresholds that applied); this says
// them in English, for the table and for the "explanation" key of `mgm leak --json`.
#pragma once

#include <mgm/telemetry/leak_analysis.hpp>

#include <string>

namespace mgm_tool {

/// @brief One sentence that explains `rep`: its reason, said with the report's numbers.
[[nodiscard]] std::string leak_explanation(const mgm::telemetry::leak_report& rep);

/// @brief The sentence for one GPU's or one process's report of a log: as for its series, except
/// that a GPU or process none of whose rows had a memory reading says how many rows it had.
[[nodiscard]] std::string leak_explanation(const mgm::telemetry::gpu_leak_report& g);

}  // namespace mgm_tool
