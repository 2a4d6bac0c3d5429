// qkv — the query, key and value projections of real models (GPT-2, Llama, …), computed exactly and turned
// into experiments.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>

#include "cli.hpp"
#include "qkv/error.hpp"
#include "qkv/flash.hpp"

namespace qkv::cli {

std::vector<double> parse_numbers(const std::string& arg, const std::string& text, size_t expected) {
  std::vector<double> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    double v = 0;
    bool ok = !item.empty() && item.find_first_of(" \t") == std::string::npos;
    if (ok) {
      try {
        v = std::stod(item, &used);
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok || used != item.size() || !std::isfinite(v))
      usage_error(arg + ": '" + item + "' is not a finite number (in '" + text + "')");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (expected && out.size() != expected)
    usage_error(arg + ": expected " + std::to_string(expected) + " comma-separated numbers, found " +
                std::to_string(out.size()) + " in '" + text + "'");
  return out;
}

std::vector<int> parse_ints(const std::string& arg, const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  for (double v : parse_numbers(arg, text)) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma + 1;
    if (v != double(int64_t(v)) || v < -2147483648.0 || v > 2147483647.0)
      usage_error(arg + ": '" + item + "' is not an integer (in '" + text + "')");
    out.push_back(int(v));
  }
  return out;
}

// Strings holding a lone byte of a multi-byte character (a byte-level token's label) are written with
// U+FFFD in its place, as qkv serve writes them, instead of throwing json's type_error 316.
void print_json(const nlohmann::json& j) {
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

namespace {
std::vector<std::pair<int, Registrar>>& registry() {
  static std::vector<std::pair<int, Registrar>> r;
  return r;
}
}  // namespace

RegisterCommand::RegisterCommand(int order, Registrar r) { registry().push_back({order, r}); }

void register_all(CLI::App& app) {
  auto r = registry();
  std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [order, fn] : r) fn(app);
}

}  // namespace qkv::cli

int main(int argc, char** argv) {
  CLI::App app{
      "qkv — the query, key and value projections of real models (GPT-2, Llama, Mistral, Qwen2, Gemma, GPT-NeoX, "
      "Phi-3, GPT-Neo), computed exactly, and every claim about them as an experiment you can run."};
  app.name("qkv");
  app.require_subcommand(1);
  qkv::cli::register_all(app);
  try {
    qkv::flash_path();  // QKV_ISA read and checked here, never first inside a kernel's OpenMP region
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "qkv: error: %s\nRun 'qkv --help' for usage.\n", e.what());
    return 2;
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "qkv: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
