#!/bin/sh
# loadtests/soak-sampler.ts execs its kubectl directly: this runs the stand-in (fake-kubectl.mjs).
exec node "$(dirname "$0")/fake-kubectl.mjs" "$@"
