// Loader for text fixtures: `@case <name>` followed by the case's lines, up to the next `@case`
// (lines starting with '#' before the first case are comments). Used for key lists, printed modules and
// error messages dumped from PyTorch.
#pragma once

#include <map>
#include <string>

namespace troupe::testing {

/// Parses `file` (relative to fixtures_dir(), or absolute) into name -> text (lines joined by '\n',
/// without a trailing newline). Throws std::runtime_error naming the file when it can't be read or a
/// case name repeats.
std::map<std::string, std::string> load_text_cases(const std::string& file);

}  // namespace troupe::testing
