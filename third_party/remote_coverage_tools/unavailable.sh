#!/bin/sh
echo "coverage is not available in this offline Bazel setup (third_party/remote_coverage_tools)" >&2
exit 1
