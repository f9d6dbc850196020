#!/bin/sh
# Formats and lints the Python sources; exits non-zero on the first problem.
set -eu
ruff format --check .
ruff check .
