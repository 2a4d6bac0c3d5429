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

// One per command file.
void register_example(CLI::App& app);
void register_gradcheck(CLI::App& app);
void register_saturate(CLI::App& app);
void register_model_commands(CLI::App& app);  // info, tokenize, run, dump
void register_init(CLI::App& app);

}  // namespace qkv::cli
