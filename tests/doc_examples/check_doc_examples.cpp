// SPDX-License-Identifier: Apache-2.0
// Compiles every ```cpp block of the given Markdown files, so that the examples in README.md and
// docs/ cannot rot. Each file becomes translation units under the output folder, compiled with
// -fsyntax-only after prelude.hpp (the application the snippets take for granted):
//  - a block with `int main(` is a whole program: a unit of its own;
//  - a block that begins with #include, namespace or struct sits at
//    namespace scope, in order with the file's other blocks;
//  - any other block is statements: the body of a function of its own.
// A #line directive before each block makes the compiler's errors name the Markdown file and line.
//   check_doc_examples <compiler> <prelude dir> <include dir> <output dir> <file.md>...

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Block {
  int first_line = 0;  // of the block's code, 1-based, in its Markdown file
  std::string code;
};

std::vector<Block> cpp_blocks(const std::filesystem::path& markdown) {
  std::ifstream in(markdown);
  if (!in) throw std::runtime_error("cannot read " + markdown.string());
  std::vector<Block> blocks;
  std::string line;
  bool inside = false;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!inside && (line == "```cpp" || line == "```c++")) {
      inside = true;
      blocks.push_back({number + 1, {}});
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
    } else if (inside) {
      blocks.back().code += line + "\n";
    }
  }
  if (inside) throw std::runtime_error(markdown.string() + ": a ```cpp block is never closed");
  return blocks;
}

bool starts_with_any(const std::string& code, const std::vector<std::string>& words) {
  const auto begin = code.find_first_not_of(" \n");
  if (begin == std::string::npos) return false;
  for (const std::string& w : words) {
    if (code.compare(begin, w.size(), w) == 0) return true;
  }
  return false;
}

std::string line_directive(const Block& b, const std::filesystem::path& markdown) {
  return "#line " + std::to_string(b.first_line) + " \"" + markdown.string() + "\"\n";
}

// What every unit is compiled with. `first` is searched for prelude.hpp before the prelude's
// own folder: g++ takes a precompiled prelude.hpp.gch found there instead of the header.
std::string flags(const std::string& first, const std::string& prelude_dir,
                  const std::string& include_dir) {
  return " -std=c++20 -I '" + first + "' -I '" + prelude_dir + "' -I '" + include_dir + "' ";
}

bool compiles(const std::string& compiler, const std::string& with,
              const std::filesystem::path& unit) {
  const std::string command = "'" + compiler + "'" + with + "-fsyntax-only '" + unit.string() + "'";
  return std::system(command.c_str()) == 0;
}

// The prelude (durable.hpp, the test kit, the standard library: most of what each unit costs)
// compiled once into OUT/prelude.hpp.gch, where g++ finds it (clang reads no .gch for an
// #include, and parses the header as before). A failure here leaves every unit to parse it.
void precompile_prelude(const std::string& compiler, const std::string& with,
                        const std::string& prelude_dir, const std::filesystem::path& out) {
  const std::string command = "'" + compiler + "'" + with + "-x c++-header '" + prelude_dir +
                              "/prelude.hpp' -o '" + (out / "prelude.hpp.gch").string() + "'";
  if (std::system(command.c_str()) != 0) std::filesystem::remove(out / "prelude.hpp.gch");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr << "usage: check_doc_examples COMPILER PRELUDE_DIR INCLUDE_DIR OUT_DIR FILE.md...\n";
    return 2;
  }
  const std::string compiler = argv[1], prelude_dir = argv[2], include_dir = argv[3];
  const std::filesystem::path out = argv[4];
  std::filesystem::create_directories(out);
  const std::string with = flags(out.string(), prelude_dir, include_dir);
  precompile_prelude(compiler, with, prelude_dir, out);
  int blocks_seen = 0, failed = 0;
  try {
    for (int i = 5; i < argc; ++i) {
      const std::filesystem::path markdown = argv[i];
      const std::vector<Block> blocks = cpp_blocks(markdown);
      blocks_seen += static_cast<int>(blocks.size());
      std::string stem =
          markdown.stem().string();  // a C++ name: getting-started -> getting_started
      for (char& c : stem) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      std::vector<std::filesystem::path> units;
      std::ostringstream shared;  // the file's blocks that are not programs, in order
      shared << "#include \"prelude.hpp\"\n";
      int programs = 0, functions = 0;
      for (const Block& b : blocks) {
        if (b.code.find("int main(") != std::string::npos) {
          units.push_back(out / (stem + "_program" + std::to_string(++programs) + ".cpp"));
          std::ofstream(units.back()) << "#include \"prelude.hpp\"\n"
                                      << line_directive(b, markdown) << b.code;
        } else if (starts_with_any(b.code, {"#include", "namespace", "struct"})) {
          shared << line_directive(b, markdown) << b.code;
        } else {
          shared << "[[maybe_unused]] static durable::json " << stem << "_example" << ++functions
                 << "(const durable::json& order) {\n"  // a parameter: examples capture it
                 << line_directive(b, markdown) << b.code << "\n  return nullptr;\n}\n";
        }
      }
      units.push_back(out / (stem + ".cpp"));
      std::ofstream(units.back()) << shared.str();
      for (const std::filesystem::path& unit : units) {
        if (!compiles(compiler, with, unit)) {
          std::cerr << "an example of " << markdown.string() << " does not compile ("
                    << unit.string() << ")\n";
          ++failed;
        }
      }
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cout << blocks_seen << " C++ examples checked, " << failed << " unit(s) failed\n";
  return failed == 0 && blocks_seen > 0 ? 0 : 1;
}
