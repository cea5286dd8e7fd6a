"""What relock's BUILD.bazel files share."""

# Warnings of relock's own code (CMakeLists.txt: relock_target_warnings).
# --config=werror (.bazelrc) makes them errors.
RELOCK_COPTS = [
    "-Wall",
    "-Wextra",
]
