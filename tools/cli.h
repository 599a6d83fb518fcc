// The command line of every troupe program (examples/, tools/, bench/): CLI11 (Debian's libcli11-dev)
// with one rule for bad input. An unknown flag, a missing value, a value that is not a number, a size
// that is zero or negative, a missing or unreadable file: one line on stderr naming the flag (or file)
// and exit code 2. --help prints the usage and exits 0.
//
//   cli::App app("train_digits", "Trains a classifier on the 8x8 digits.");  // program, description
//   app.add_option("--epochs", cfg.epochs, "epochs")->check(cli::Positive);
//   app.add_option("--data", cfg.data, "digits file")->check(cli::ReadableFile);
//   cli::add_launch_flags(app);            // --ranks N, --dashboard PORT (taken by launch::run)
//   cli::parse(app, argc, argv);           // exits 2 on a bad command line
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

namespace troupe::cli {

/// CLI11's application object named after the program: add options with add_option / add_flag, then
/// cli::parse. A flag given twice takes its last value (as the hand-written parsers did).
class App : public CLI::App {
 public:
  App(std::string program, std::string description) : CLI::App(std::move(description), std::move(program)) {
    option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
};

/// A bad value found after parsing (a file that does not decode, flags that contradict each other):
/// run_main prints its message and exits 2 like a parse error.
struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Exit code of a bad command line or bad input file (as argparse and CLI tools use).
inline constexpr int kBadInput = 2;

/// A number > 0 (sizes, counts, epochs, steps, learning rates).
inline const CLI::Validator Positive = CLI::Validator(
    [](std::string& v) -> std::string {
      try {
        size_t used = 0;
        const double d = std::stod(v, &used);
        if (used != v.size()) return "needs a number, got '" + v + "'";
        if (!(d > 0)) return "must be positive, got " + v;
      } catch (const std::exception&) {
        return "needs a number, got '" + v + "'";
      }
      return {};
    },
    "POSITIVE");

/// A number >= 0.
inline const CLI::Validator NonNegative = CLI::Validator(
    [](std::string& v) -> std::string {
      try {
        size_t used = 0;
        const double d = std::stod(v, &used);
        if (used != v.size()) return "needs a number, got '" + v + "'";
        if (!(d >= 0)) return "must not be negative, got " + v;
      } catch (const std::exception&) {
        return "needs a number, got '" + v + "'";
      }
      return {};
    },
    "NONNEGATIVE");

/// A file that exists, is not a directory and can be opened for reading.
inline const CLI::Validator ReadableFile = CLI::Validator(
    [](std::string& path) -> std::string {
      std::string exists = CLI::ExistingFile(path);  // "File does not exist: P", "File is actually a directory: P"
      if (!exists.empty()) return exists;
      std::ifstream in(path, std::ios::binary);
      if (!in) return "cannot read " + path;
      return {};
    },
    "FILE");

/// A file that `decode` reads without throwing (a dataset, a checkpoint): its error becomes the flag's
/// message, "--data: [Digits::load] 'x': not a digits file ...". Chain it after ReadableFile.
inline CLI::Validator Decodes(std::function<void(const std::string&)> decode) {
  return CLI::Validator(
      [decode = std::move(decode)](std::string& path) -> std::string {
        try {
          decode(path);
        } catch (const std::exception& e) {
          return e.what();
        }
        return {};
      },
      "FILE");
}

/// Declares launch::run's flags (--ranks N with 1 <= N <= 4096, --dashboard PORT|ADDR:PORT) so that the
/// program's parser accepts them; launch::run takes them out of argv itself.
inline void add_launch_flags(App& app) {
  app.add_option("--ranks", "run N ranks as threads of this process (without mpirun)")
      ->check(CLI::Range(1, 4096))
      ->type_name("N");
  app.add_option("--dashboard", "serve the live training page on PORT or ADDR:PORT (launch)")
      ->type_name("PORT")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {  // the form launch's parse_dashboard_option accepts
            const size_t colon = v.rfind(':');
            const std::string port = colon == std::string::npos ? v : v.substr(colon + 1);
            if (colon == 0) return "empty address in '" + v + "'";
            if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
                std::stoi(port) > 65535)
              return "needs PORT or ADDR:PORT with a port in [0, 65535], got '" + v + "'";
            return {};
          },
          "PORT"));
}

namespace detail {
// CLI11's messages name the option ("--epochs: Value abc could not be converted"); ours lead with the
// program so that a line in a job's log says where it came from.
inline std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}
}  // namespace detail

/// Parses argv into the options of `app`. --help: prints the usage, exits 0. A bad command line:
/// prints "<program>: <what was wrong> (see --help)" and exits 2.
inline void parse(App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), detail::one_line(e.what()).c_str());
    std::exit(kBadInput);
  }
}

/// Prints "<program>: <what was wrong>" and exits 2: for checks that need more than one flag.
[[noreturn]] inline void fail(const App& app, const std::string& what) {
  std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), detail::one_line(what).c_str());
  std::exit(kBadInput);
}

/// Runs body and turns what escapes it into one line on stderr: BadInput exits 2, any other
/// exception exits 1 (a failure of the run, not of its input).
inline int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const BadInput& e) {
    std::fprintf(stderr, "%s: %s\n", program, detail::one_line(e.what()).c_str());
    return kBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, detail::one_line(e.what()).c_str());
    return 1;
  }
}

}  // namespace troupe::cli
