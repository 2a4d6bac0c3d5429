// Shared pieces of the qkv command line: each command file registers a subcommand whose callback
// parses, calls the library, and renders (a text table by default, --json for machines).
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qkv::cli {

// Strictly parses "a,b,c" into numbers; `expected` = 0 accepts any count >= 1. Usage error naming
// the argument otherwise.
std::vector<double> parse_numbers(const std::string& arg, const std::string& text, size_t expected = 0);
std::vector<int> parse_ints(const std::string& arg, const std::string& text);

void print_json(const nlohmann::json& j);  // pretty, to stdout, with a trailing newline

// Each command file registers its subcommands with one line at namespace scope:
//   QKV_COMMAND(30, register_heads);
// The number orders `qkv --help`. No shared list to edit when a command is added.
using Registrar = void (*)(CLI::App&);
struct RegisterCommand {
  RegisterCommand(int order, Registrar r);
};
void register_all(CLI::App& app);

#define QKV_COMMAND(order, fn) static const ::qkv::cli::RegisterCommand qkv_command_##fn(order, fn)

}  // namespace qkv::cli
