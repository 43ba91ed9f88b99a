"""horovodrun 0.28.1's options on mxplugin-run (Note [horovodrun's options]
in mxplugin_run/horovodrun_options.py): each mapped to what the ranks see,
or refused at once in one line naming it; --config-file's YAML; a Horovod
job script's launch line run unchanged."""
import os
import re
import subprocess
import sys

import pytest

from test_launcher import REPO, TIMEOUT, launcher, launcher_env

# Every option of horovodrun 0.28.1 beyond those mxplugin-run had (issue 58's list).
HOROVODRUN_OPTIONS = (
    "-v", "--version", "--disable-cache", "--start-timeout", "--network-interfaces", "--output-filename",
    "--config-file", "-p", "--ssh-port", "-i", "--ssh-identity-file", "--fusion-threshold-mb", "--cycle-time-ms",
    "--cache-capacity", "--hierarchical-allreduce", "--no-hierarchical-allreduce", "--hierarchical-allgather",
    "--no-hierarchical-allgather", "--torus-allreduce", "--no-torus-allreduce", "--autotune", "--no-autotune",
    "--autotune-log-file", "--autotune-warmup-samples", "--autotune-steps-per-sample",
    "--autotune-bayes-opt-max-samples", "--autotune-gaussian-process-noise", "--min-num-proc", "--max-num-proc",
    "--slots-per-host", "--timeline-mark-cycles", "--no-timeline-mark-cycles", "--stall-check", "--no-stall-check",
    "--stall-check-warning-time-seconds", "--stall-check-shutdown-time-seconds", "--mpi-threads-disable",
    "--no-mpi-threads-disable", "--mpi-args", "--tcp", "--binding-args", "--num-nccl-streams", "--thread-affinity",
    "--gloo-timeout-seconds", "--log-level", "--log-with-timestamp", "--log-without-timestamp",
    "--prefix-output-with-timestamp", "--log-hide-timestamp", "--no-log-hide-timestamp", "--gloo", "--mpi",
    "--jsrun")


def parsed(*argv):
    """mxplugin-run's arguments and the ranks' variables for `argv` (a job running `true`)."""
    from mxplugin_run import horovodrun_options, run

    args = run.parse_args([*argv, "true"])
    variables = horovodrun_options.apply(args)
    return args, variables


def test_every_horovodrun_option_is_known():
    from mxplugin_run.run import build_parser

    known = set(build_parser()._option_string_actions)
    assert not [o for o in HOROVODRUN_OPTIONS if o not in known], [o for o in HOROVODRUN_OPTIONS if o not in known]


@pytest.mark.parametrize("argv, expected", [
    (["--fusion-threshold-mb", "32"], {"MXPLUGIN_FUSION_THRESHOLD": str(32 << 20)}),
    (["--cycle-time-ms", "3.5"], {"MXPLUGIN_CYCLE_TIME": "3.5"}),
    (["--cache-capacity", "512"], {"MXPLUGIN_CACHE_CAPACITY": "512"}),
    (["--disable-cache"], {"MXPLUGIN_CACHE_CAPACITY": "0"}),
    (["--hierarchical-allreduce"], {"MXPLUGIN_HIERARCHICAL_ALLREDUCE": "1"}),
    (["--no-hierarchical-allreduce"], {"MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0"}),
    (["--num-nccl-streams", "2"], {"MXPLUGIN_NUM_STREAMS": "2"}),
    (["--mpi-threads-disable"], {"MXPLUGIN_MPI_THREADS": "funneled"}),
    (["--no-mpi-threads-disable"], {"MXPLUGIN_MPI_THREADS": "multiple"}),
    (["--autotune", "--autotune-log-file", "t.csv", "--autotune-warmup-samples", "3",
      "--autotune-steps-per-sample", "7"], {"MXPLUGIN_AUTOTUNE": "1", "MXPLUGIN_AUTOTUNE_LOG": "t.csv",
                                              "MXPLUGIN_AUTOTUNE_WARMUP_STEPS": "3",
                                              "MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE": "7"}),
    (["--no-autotune"], {"MXPLUGIN_AUTOTUNE": "0"}),
    (["--timeline-mark-cycles"], {"MXPLUGIN_TIMELINE_MARK_CYCLES": "1"}),
    (["--stall-check-warning-time-seconds", "30", "--stall-check-shutdown-time-seconds", "90"],
     {"MXPLUGIN_STALL_CHECK_TIME_SECONDS": "30", "MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS": "90"}),
    (["--no-stall-check"], {"MXPLUGIN_STALL_CHECK_TIME_SECONDS": "0"}),
    (["--log-level", "WARNING"], {"MXPLUGIN_LOG_LEVEL": "warning"}),
    (["--log-level", "FATAL"], {"MXPLUGIN_LOG_LEVEL": "error"}),
    (["--tcp"], {"UCX_TLS": "tcp,sm,self", "OMPI_MCA_btl": "tcp,vader,self", "OMPI_MCA_pml": "ob1"}),
    (["--mpi", "--no-torus-allreduce", "--no-hierarchical-allgather", "--log-without-timestamp",
      "--log-hide-timestamp"], {}),
])
def test_a_mapped_option_sets_what_its_horovod_variable_would(argv, expected):
    assert parsed("-np", "2", *argv)[1] == expected


def test_launch_options_map_to_the_launchers_own():
    args, _ = parsed("-np", "2", "-p", "2222", "-i", "/k/id", "--start-timeout", "7", "--network-interfaces", "eth1",
                     "--mpi-args", "-genv A 1", "--binding-args", "-bind-to core", "--min-num-proc", "1",
                     "--max-num-proc", "3")
    assert args.rsh == "ssh -p 2222 -i /k/id" and args.ssh_connect_timeout == 7.0, args
    assert args.network_interface == "eth1" and args.mpi_extra == ["-genv", "A", "1", "-bind-to", "core"], args
    assert (args.min_np, args.max_np) == (1, 3)
    from mxplugin_run.hosts import UsageError

    with pytest.raises(UsageError, match="one interface"):
        parsed("-np", "2", "--network-interfaces", "eth0,eth1")
    with pytest.raises(UsageError, match="put them in --rsh"):
        parsed("-np", "2", "--rsh", "rsh", "-p", "22")


def test_slots_per_host_fills_hosts_given_without_a_count(tmp_path):
    from mxplugin_run.elastic.discovery import parse_discovered
    from mxplugin_run.hosts import parse_hostfile, parse_hosts

    assert parse_hosts("a,b:1", 4) == [("a", 4), ("b", 1)]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a\nb slots=2\n")
    assert parse_hostfile(str(hostfile), 3) == [("a", 3), ("b", 2)]
    assert parse_discovered("a\nb:1\n", "script", 2) == [("a", 2), ("b", 1)]


@pytest.mark.parametrize("option", sorted(__import__("mxplugin_run.horovodrun_options",
                                                      fromlist=["REFUSED"]).REFUSED)
                         + ["--log-with-timestamp", "--no-log-hide-timestamp"])
def test_a_refused_option_fails_at_once_naming_itself(option, capsys):
    from mxplugin_run import horovodrun_options, run

    nargs = horovodrun_options.REFUSED.get(option, (0, ""))[0]
    code = run.main(["-np", "2", option, *(["1"] * nargs), "python", "train.py"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and f"error: {option}: " in err, err


def test_config_file_reads_horovodruns_yaml_and_the_command_line_wins(tmp_path):
    config = tmp_path / "hvd.yaml"
    config.write_text("params:\n  fusion_threshold_mb: 32\n  cycle_time_ms: 10\n  cache_capacity: 2048\n"
                      "  hierarchical_allreduce: true\nautotune:\n  enabled: true\n  log_file: tune.csv\n"
                      "  warmup_samples: 5\n  steps_per_sample: 20\ntimeline:\n  filename: t.json\n"
                      "  mark_cycles: true\nstall_check:\n  enabled: true\n  warning_time_seconds: 120\n"
                      "  shutdown_time_seconds: 240\nlibrary_options:\n  mpi_threads_disable: true\n"
                      "  num_nccl_streams: 2\nlogging:\n  level: INFO\n  hide_timestamp: true\n")
    args, variables = parsed("-np", "2", "--config-file", str(config), "--cycle-time-ms", "5")
    assert variables == {"MXPLUGIN_FUSION_THRESHOLD": str(32 << 20), "MXPLUGIN_CYCLE_TIME": "5",
                         "MXPLUGIN_CACHE_CAPACITY": "2048", "MXPLUGIN_HIERARCHICAL_ALLREDUCE": "1",
                         "MXPLUGIN_AUTOTUNE": "1", "MXPLUGIN_AUTOTUNE_LOG": "tune.csv",
                         "MXPLUGIN_AUTOTUNE_WARMUP_STEPS": "5", "MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE": "20",
                         "MXPLUGIN_TIMELINE_MARK_CYCLES": "1", "MXPLUGIN_STALL_CHECK_TIME_SECONDS": "120",
                         "MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS": "240", "MXPLUGIN_MPI_THREADS": "funneled",
                         "MXPLUGIN_NUM_STREAMS": "2", "MXPLUGIN_LOG_LEVEL": "info"}, variables
    assert args.timeline == "t.json"
    from mxplugin_run.hosts import UsageError

    for text, said in (("params:\n  hierarchical_allgather: true\n", "no hierarchical variant"),
                       ("controller: gloo\n", "not Gloo"), ("params:\n  fusion: 1\n", "not a horovodrun setting")):
        config.write_text(text)
        with pytest.raises(UsageError, match=said):
            parsed("-np", "2", "--config-file", str(config))


# As a Horovod job script launches (every option with a meaning here), printing what each rank sees.
SHOW = ("import os, sys\nnames = ['MXPLUGIN_FUSION_THRESHOLD', 'MXPLUGIN_CYCLE_TIME', 'MXPLUGIN_CACHE_CAPACITY',"
        " 'MXPLUGIN_HIERARCHICAL_ALLREDUCE', 'MXPLUGIN_TIMELINE_MARK_CYCLES', 'MXPLUGIN_LOG_LEVEL']\n"
        "print('rank', os.environ['PMI_RANK'], ' '.join(os.environ.get(n, '-') for n in names), flush=True)\n"
        "sys.stderr.write('err line\\n')\n")


def test_a_horovod_job_scripts_launch_line_runs_unchanged(tmp_path):
    out = tmp_path / "logs"
    result = subprocess.run(launcher("-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "5",
                                     "--cache-capacity", "512", "--hierarchical-allreduce", "--timeline-mark-cycles",
                                     "--log-level", "WARNING", "--output-filename", str(out),
                                     "--prefix-output-with-timestamp", "--mpi", sys.executable, "-c", SHOW),
                            cwd=REPO, env=launcher_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    seen = f"{32 << 20} 5 512 1 1 warning"
    for rank in (0, 1):
        assert re.search(rf"^\w{{3}} \w{{3}} \d\d \d\d:\d\d:\d\d \d{{4}} rank {rank} {seen}$", result.stdout,
                         re.M), result.stdout
        with open(out / f"rank.{rank}" / "stdout") as f:
            assert f.read() == f"rank {rank} {seen}\n"
        with open(out / f"rank.{rank}" / "stderr") as f:
            assert f.read() == "err line\n"


def test_version_prints_the_installed_version():
    result = subprocess.run(launcher("--version"), cwd=REPO, env=launcher_env(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0 and re.fullmatch(r"mxplugin-run \S+\n", result.stdout), result


def test_output_files_are_padded_to_the_largest_rank(tmp_path):
    from mxplugin_run.whole_lines import output_files

    saved = os.environ.get("PMI_SIZE")
    os.environ["PMI_SIZE"] = "12"
    try:
        for f in output_files(str(tmp_path), 3):
            f.close()
    finally:
        if saved is None:
            os.environ.pop("PMI_SIZE")
        else:
            os.environ["PMI_SIZE"] = saved
    assert sorted(os.listdir(tmp_path / "rank.03")) == ["stderr", "stdout"]


def test_horovods_variables_are_honoured_translated_or_named_in_one_warning():
    """Note [Horovod's variables] in mxplugin/horovod_variables.py."""
    from mxplugin import horovod_variables as hv

    environ = {"HOROVOD_FUSION_THRESHOLD": "1", "HOROVOD_MPI_THREADS_DISABLE": "1",
               "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "4", "HOROVOD_STALL_CHECK_DISABLE": "1",
               "HOROVOD_HIERARCHICAL_ALLGATHER": "1", "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "MPI",
               "HOROVOD_LOG_HIDE_TIME": "1", "HOROVOD_SOMETHING_ELSE": "1", "MXPLUGIN_AUTOTUNE_WARMUP_STEPS": "9"}
    to_set, ignored = hv.read(environ)
    assert to_set == {"MXPLUGIN_MPI_THREADS": "funneled", "MXPLUGIN_STALL_CHECK_TIME_SECONDS": "0"}, to_set
    assert [name for name, _, _ in ignored] == ["HOROVOD_CONTROLLER", "HOROVOD_HIERARCHICAL_ALLGATHER"], ignored
    assert hv.read({"HOROVOD_STALL_CHECK_DISABLE": "0", "HOROVOD_MPI_THREADS_DISABLE": "0"}) == (
        {"MXPLUGIN_MPI_THREADS": "multiple"}, [])
    with pytest.warns(UserWarning, match=r"HOROVOD_CONTROLLER=gloo \(mxplugin's controller is MPI\); "
                                         r"HOROVOD_HIERARCHICAL_ALLGATHER=1"):
        hv.warn(ignored, 0)
    # Every variable Horovod 0.28.1 reads at run time (horovod/common/common.h's knobs, its logging) is one kind.
    horovods = ("MPI_THREADS_DISABLE TIMELINE TIMELINE_MARK_CYCLES AUTOTUNE AUTOTUNE_LOG AUTOTUNE_WARMUP_SAMPLES "
                "AUTOTUNE_STEPS_PER_SAMPLE AUTOTUNE_BAYES_OPT_MAX_SAMPLES AUTOTUNE_GAUSSIAN_PROCESS_NOISE "
                "FUSION_THRESHOLD CYCLE_TIME STALL_CHECK_DISABLE STALL_CHECK_TIME_SECONDS STALL_SHUTDOWN_TIME_SECONDS "
                "HIERARCHICAL_ALLREDUCE HIERARCHICAL_ALLGATHER CACHE_CAPACITY BATCH_D2D_MEMCOPIES NUM_NCCL_STREAMS "
                "CPU_OPERATIONS CONTROLLER CCL_CACHE GLOO_IFACE ADASUM_MPI_CHUNK_SIZE THREAD_AFFINITY "
                "DISABLE_GROUP_FUSION DISABLE_NVTX_RANGES ENABLE_ASYNC_COMPLETION DYNAMIC_PROCESS_SETS "
                "ENABLE_XLA_OPS ELASTIC LOG_LEVEL LOG_HIDE_TIME GLOO_TIMEOUT_SECONDS").split()
    kinds = hv.ALIASES | hv.AS_IT_STANDS | set(hv.TRANSLATED) | set(hv.NOT_APPLICABLE)
    assert [name for name in horovods if name not in kinds] == []


def test_a_rank_warns_once_of_horovods_variables_it_ignores():
    code = "import warnings, mxplugin as hvd\nwarnings.simplefilter('always')\nhvd.init()\nprint('ok', hvd.rank())"
    result = subprocess.run(launcher("-np", "2", sys.executable, "-c", code), cwd=REPO,
                            env=launcher_env(HOROVOD_HIERARCHICAL_ALLGATHER="1"), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("mxplugin ignores these variables of Horovod's: HOROVOD_HIERARCHICAL_ALLGATHER=1") \
        == 1, result.stderr
