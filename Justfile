# anyswe tasks. `./dev <recipe>` installs uv and just first; `just --list` shows all recipes.

set shell := ["bash", "-euo", "pipefail", "-c"]

export UV_PYTHON_DOWNLOADS := "never"
# The environment's packages compiled when installed: with PYTHONDONTWRITEBYTECODE set (as it is on
# some machines) nothing else ever writes a .pyc, and every process (an `anyswe` command, a Ray worker,
# a served rollout) compiled ray, litellm and pydantic from source: `import litellm` took 7.1 s, 4.0 s compiled.
export UV_COMPILE_BYTECODE := "1"

# The demo experiment: gold and noop x docker and apptainer over the embedded demo benchmark.
demo: setup
    uv run anyswe smoke
    uv run anyswe apply specs/demo.yaml
    uv run anyswe diff runs/demo --by provider
    uv run anyswe report runs/demo -o runs/demo/report.html

# Everything a fresh machine needs: container runtimes, base image, Python environment.
setup:
    bash scripts/provision.sh all
    just sync

# The Python environment, compiled. UV_COMPILE_BYTECODE compiles the installed packages only, not this
# checkout's own (an editable install): with PYTHONDONTWRITEBYTECODE set, every `anyswe` process
# compiled anyswe's modules from source, about 1 s of a resumed `anyswe apply`'s 2 s (0.7-1.0 s compiled).
# The demo tasks' repositories are data, not modules: they stay as shipped.
sync:
    uv sync --frozen --all-extras
    uv run --frozen python -m compileall -q -j 0 -x 'anyswe/datasets/demo/tasks/' anyswe

# The whole suite: the fast tier first (a unit failure shows in minutes, before any provisioning),
# then everything a fresh machine needs, then the container tier. Each test runs once.
test: test-unit
    bash scripts/provision.sh all
    bash scripts/provision.sh browser
    bash scripts/provision.sh image-bullseye
    just containers

# No provisioning: it runs on a laptop, as any user, and first in CI (under 3 minutes on 2 idle cores).
# The fast tier: lint, type-check, then every test that needs no docker, apptainer or Ray.
test-unit:
    just sync
    just lint
    uv run pytest -m "not containers" -n 2

# The container tier alone (tests marked `containers`: real runtimes, sandboxes, Ray).
test-containers: setup lint
    bash scripts/provision.sh browser
    bash scripts/provision.sh image-bullseye
    just containers

# The container tier's tests, on what is provisioned: three workers (pytest-xdist; a file stays on one
# worker, so its fixtures are built once and its tests keep their order), then alone the tests marked
# `exclusive` (they restart dockerd under every concurrent test's containers, fork-bomb the CPUs, run a
# thousand docker rollouts that starve concurrent agents, or
# start Ray nodes, which miss Ray's fixed start-up wait on busy CPUs).
containers workers="3":
    uv run pytest -m "containers and not exclusive" -n {{workers}} --dist loadfile --no-loadscope-reorder
    uv run pytest -m "containers and exclusive"

mypy_cache := env_var_or_default("ANYSWE_CACHE", env_var_or_default("XDG_CACHE_HOME", home_directory() / ".cache") / "anyswe") / "mypy"

# mypy keeps its cache beside anyswe's, outside the checkout: a clean clone (CI) checks only what changed
# since the last check on this machine (42 CPU-seconds from nothing, 2 with the cache). mypy validates
# each module's entry by its source's hash, whatever the clone's path; each check has its own cache.
lint:
    uv run ruff check anyswe tests bench notebooks examples scripts
    uv run ruff format --check anyswe tests bench examples scripts
    uv run mypy --cache-dir "{{mypy_cache}}/anyswe"
    uv run mypy --cache-dir "{{mypy_cache}}/example" --strict examples/plugins/anyswe-example/anyswe_example
    uv run mypy --cache-dir "{{mypy_cache}}/scripts" --strict scripts/census.py

# Not in CI (which runs the census command on the demo rows and one real instance): run it before
# resolving an issue that touches images, grading, a benchmark or a runtime. Resumable
# (runs/census/<commit>/); `just census --tier pro` runs one tier and prints its table only.
# The gold census of every real tier (Verified, Multilingual, Pro, built here offline), 2 gold and 2 empty
# passes per instance on docker and apptainer: its table into docs/real_images.md with command, date, commit.
census *args: setup
    bash scripts/provision.sh image-bullseye
    uv run python scripts/census.py {{args}}

# Remove every leftover anyswe container, instance and overlay.
gc:
    uv run anyswe gc

# Benchmarks (figures, never pass/fail; docs/performance.md records them).
bench: setup
    uv run python bench/regrade_corpus.py
    uv run python bench/swebench_import.py
    uv run python bench/tables.py
    uv run python bench/report.py
    uv run python bench/overhead.py
    uv run python bench/concurrency.py
    uv run python bench/concurrency.py --provider apptainer
    uv run python bench/mixed_providers.py
    uv run python bench/footprint.py
    uv run python bench/gateway_latency.py
    uv run python bench/serve_load.py
    uv run python bench/agent_throughput.py
    uv run python bench/harbor.py
