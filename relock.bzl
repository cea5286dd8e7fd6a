"""What relock's BUILD.bazel files share."""

load("@rules_cc//cc:defs.bzl", "cc_library")

# Warnings of relock's own code (CMakeLists.txt: relock_target_warnings).
# --config=werror (.bazelrc) makes them errors.
RELOCK_COPTS = [
    "-Wall",
    "-Wextra",
]

def relock_layer(name, visibility, deps):
    """A layer of the library, lib/<name>/ (lib/BUILD.bazel has the rules).

    The package's sources and headers as one cc_library named for the layer,
    and their filegroup `sources` for tests/check_layers_test.

    Args:
      name: the layer, as in //lib/<name>.
      visibility: the layers that may depend on it (a //lib:above_<name>
        package group), and the tests, benchmarks or fuzzers that use it.
      deps: the layers below it that it uses, and third-party libraries.
    """
    cc_library(
        name = name,
        srcs = native.glob(["*.cc"]),
        hdrs = native.glob(["*.h"]),
        copts = RELOCK_COPTS,
        visibility = visibility,
        deps = deps,
    )
    native.filegroup(
        name = "sources",
        srcs = native.glob([
            "*.cc",
            "*.h",
        ]),
        visibility = ["//tests:__pkg__"],
    )
