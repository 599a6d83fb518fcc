#include "text_cases.h"

#include <fstream>
#include <stdexcept>

#include "fixtures.h"

namespace troupe::testing {

std::map<std::string, std::string> load_text_cases(const std::string& file) {
  std::string path = (!file.empty() && file[0] == '/') ? file : fixtures_dir() + "/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("[load_text_cases] can't open " + path);
  std::map<std::string, std::string> out;
  std::string line, name, body;
  bool in_case = false, first = true;
  auto flush = [&] {
    if (!in_case) return;
    if (!out.emplace(name, body).second) throw std::runtime_error("[load_text_cases] " + path + ": case '" + name + "' repeats");
  };
  while (std::getline(in, line)) {
    if (line.rfind("@case ", 0) == 0) {
      flush();
      name = line.substr(6);
      body.clear();
      in_case = true;
      first = true;
      continue;
    }
    if (!in_case) continue;  // header comments
    if (!first) body += '\n';
    body += line;
    first = false;
  }
  flush();
  return out;
}

}  // namespace troupe::testing
