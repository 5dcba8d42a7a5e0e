#!/bin/sh
# Regenerates every chart in this folder: the outage experiment's (seed 1, the tables of
# docs/outages.md) and the brownout scenario's 1,000 runs (seeds 0-999). The same seeds
# write the same bytes, so a diff after running this means the numbers changed.
#
#   sh docs/charts/regenerate.sh
set -e
cd "$(dirname "$0")/../.."
cargo run --release -p rebound-study --example outages -- --charts docs/charts >/dev/null
cargo run --release -p rebound-cli --bin rebound -- \
    sim --scenario brownout --runs 1000 --charts docs/charts >/dev/null
