"""The catalog's `slurm` section: a profile's and a job's options merged field by field, the
sbatch options they become, and `extra_args` held to its allowlist with file:line:col errors."""

from __future__ import annotations

import pytest

from runlane.adapters.slurm.executor import slurm_options
from runlane.catalog.loader import parse_catalog_text
from runlane.errors import CatalogError

CATALOG = """\
version: 1
profiles:
  hpc:
    slurm:
      partition: debug
      cpus: 2
      memory: 512M
      extra_args: [--exclusive]
jobs:
  report:
    command: [python, -m, report]
    executor: slurm
    profile: hpc
    slurm:
      cpus: 4
      qos: normal
  plain:
    command: [/bin/true]
    executor: slurm
    slurm: {partition: long, nodes: 1}
"""


def test_a_jobs_slurm_fields_override_its_profiles_one_by_one() -> None:
    catalog = parse_catalog_text(CATALOG)
    spec = catalog.resolve("report").profile_spec
    assert spec is not None
    assert slurm_options(spec.model_dump()) == [
        "--partition=debug",
        "--qos=normal",
        "--cpus-per-task=4",
        "--mem=512M",
        "--exclusive",
    ]
    plain = catalog.resolve("plain").profile_spec
    assert plain is not None
    assert slurm_options(plain.model_dump()) == ["--partition=long", "--nodes=1"]


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("--output=/tmp/x", "sbatch option --output is not allowed in extra_args"),
        ("--wrap=rm -rf /", "sbatch option --wrap is not allowed"),
        ("-p debug", "must be --option or --option=value"),
        ("--begin=now\\n--uid=0", "must be --option or --option=value"),
        # sbatch would take the batch script's path as the option's value.
        ("--nodelist", "sbatch option --nodelist needs a value: write --nodelist=VALUE"),
    ],
)
def test_extra_args_outside_the_allowlist_are_errors_at_their_place(arg: str, message: str) -> None:
    text = CATALOG.replace("extra_args: [--exclusive]", f'extra_args: [--exclusive, "{arg}"]')
    with pytest.raises(CatalogError) as err:
        parse_catalog_text(text)
    problems = "\n".join(err.value.problems)
    assert "catalog.yaml:8:" in problems, problems
    assert message in problems, problems


def test_bad_values_are_refused() -> None:
    text = CATALOG.replace("memory: 512M", "memory: lots").replace("cpus: 4", "cpus: 0")
    with pytest.raises(CatalogError) as err:
        parse_catalog_text(text)
    problems = "\n".join(err.value.problems)
    assert "profiles.hpc.slurm.memory" in problems
    assert "jobs.report.slurm.cpus" in problems


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        # sbatch refuses a minimum above the maximum only when the run is submitted.
        ("2-1", "a node range is MIN-MAX with MIN at most MAX, got '2-1'"),
        # Digits of other scripts: Python and the schema's regex engine count them as digits.
        ('"\u0663"', "which does not match"),
        ('"1-\u0661"', "which does not match"),
    ],
)
def test_a_node_count_sbatch_would_refuse_is_a_catalog_error(nodes: str, message: str) -> None:
    text = CATALOG.replace("nodes: 1}", f"nodes: {nodes}}}")
    with pytest.raises(CatalogError) as err:
        parse_catalog_text(text)
    [problem] = err.value.problems
    assert problem.startswith("catalog.yaml:20:"), problem
    assert "jobs.plain.slurm.nodes" in problem, problem
    assert message in problem, problem


def test_a_node_range_in_order_is_accepted() -> None:
    text = CATALOG.replace("nodes: 1}", "nodes: 1-4}")
    spec = parse_catalog_text(text).resolve("plain").profile_spec
    assert spec is not None
    assert slurm_options(spec.model_dump()) == ["--partition=long", "--nodes=1-4"]
