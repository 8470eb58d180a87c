"""Conan 2 recipe describing Tessera's dependencies, for people who build with
Conan instead of Debian's packages. The project's supported path is Debian 12
packages (see README.md); this recipe mirrors the same libraries."""

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class TesseraConan(ConanFile):
    name = "tessera"
    version = "0.1.0"
    license = "Apache-2.0"
    description = "Distributed training framework in which everything that varies is a plugin"
    settings = "os", "compiler", "build_type", "arch"
    options = {"with_tests": [True, False]}
    default_options = {"with_tests": True, "boost/*:header_only": True}
    exports_sources = "../CMakeLists.txt", "../cmake/*", "../core/*", "../sdk/*", \
        "../plugins/*", "../apps/*", "../tests/*"

    def requirements(self):
        self.requires("boost/1.83.0")          # Boost.DLL (header-only)
        self.requires("spdlog/1.12.0")
        self.requires("fmt/10.1.1", override=True)
        self.requires("tomlplusplus/3.4.0")
        self.requires("cli11/2.3.2")
        self.requires("nlohmann_json/3.11.3")
        self.requires("openblas/0.3.25")       # GEMMs of the reference models
        if self.options.with_tests:
            self.requires("gtest/1.14.0")
            self.requires("benchmark/1.8.3")

    def layout(self):
        cmake_layout(self, src_folder="..")

    def generate(self):
        CMakeDeps(self).generate()
        tc = CMakeToolchain(self)
        tc.variables["TESSERA_BUILD_TESTS"] = bool(self.options.with_tests)
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        CMake(self).install()
