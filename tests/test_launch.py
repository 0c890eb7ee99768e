"""Launching a multi-worker job: trainers.tf_config, and the launch files of trainers/launch.

We have no Slurm or Kubernetes cluster: the Slurm script runs here with stand-ins for scontrol, srun
and the trainer (the real trainers.tf_config writes each worker's TF_CONFIG), and the TFJob manifest
is read for the fields Kubeflow's training operator acts on. Every TF_CONFIG is read back by
TensorFlow's own TFConfigClusterResolver, and every trainer command is parsed by trainers.wmt's flags.
"""

import json
import os
import stat
import subprocess
import sys

import pytest
import yaml

from keras_transformer.training.strategy import tf_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(ROOT, "trainers", "launch")


def resolve(config):
    """What TensorFlow reads from ``config`` as TF_CONFIG: (workers, task type, task index)."""
    import tensorflow as tf

    os.environ["TF_CONFIG"] = config if isinstance(config, str) else json.dumps(config)
    try:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return (resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id)
    finally:
        del os.environ["TF_CONFIG"]


def wmt_flags(args):
    """trainers.wmt's flags after parsing ``args`` as its command line (a bad flag fails)."""
    code = ("import json, sys; from absl import flags; import trainers.wmt; "
            "flags.FLAGS(['wmt'] + sys.argv[1:]); "
            "print(json.dumps({f.name: f.value for f in flags.FLAGS.get_flags_for_module("
            "'trainers.training_flags') + flags.FLAGS.get_flags_for_module('trainers.data_flags')"
            " + flags.FLAGS.get_flags_for_module('trainers.model_flags')}))")
    result = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- trainers.tf_config -------------------------------------------------------------------------

def test_tf_config_is_what_tensorflow_reads_for_each_worker():
    workers = ["node1:2222", "node2:2222", "10.0.0.3:2345"]
    for index in range(3):
        assert resolve(tf_config(workers, index)) == ({"worker": workers}, "worker", index)


@pytest.mark.parametrize("workers,index,message", [
    (["node1:2222", "node2"], 0, "'node2' is not host:port"),
    (["node1:2222", "node1:http"], 0, "is not host:port"),
    (["node1:2222", "node1:70000"], 0, "'node1:70000': port 70000 is not 1 to 65535"),
    (["node1:2222", "node1:0"], 0, "port 0 is not 1 to 65535"),
    (["node1:2222", "node1:2222"], 1, "node1:2222 is listed twice"),
    (["localhost:2222", "127.0.0.1:2222"], 1, "127.0.0.1:2222 and localhost:2222 are one address"),
    (["Node1:2222", "node1:2222"], 1, "node1:2222 and Node1:2222 are one address"),
    (["node1:2222", "node2:2222"], 2, "index 2 is not a worker of 2"),
    (["node1:2222"], -1, "index -1"),
    ([], 0, "no worker addresses"),
])
def test_tf_config_refuses_what_would_not_make_a_cluster(workers, index, message):
    with pytest.raises(ValueError, match=message):
        tf_config(workers, index)


def test_tf_config_command_prints_one_line_or_one_error():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "trainers.tf_config", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    result = run("--workers=h1:2222,h2:2222", "--index=1")
    assert result.returncode == 0, result.stderr
    assert resolve(result.stdout.strip()) == ({"worker": ["h1:2222", "h2:2222"]}, "worker", 1)
    for args, flag in ((["--workers=h1:2222", "--index=1"], "--index"),
                       (["--workers=h1", "--index=0"], "--workers"), (["--index=0"], "--workers")):
        result = run(*args)
        assert result.returncode == 2 and result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("tf_config: error:") and flag in lines[-1], result.stderr
        assert "Traceback" not in result.stderr


# --- Slurm --------------------------------------------------------------------------------------

def executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.fixture
def slurm(tmp_path):
    """Stand-ins for a 2-node allocation: scontrol expands the node list and records a requeue, srun
    runs its command once per task (SLURM_PROCID 0, 1) and returns the highest status, and the
    interpreter runs everything for real except trainers.wmt, whose environment and arguments it
    records."""
    bin_dir, records = tmp_path / "bin", tmp_path / "records"
    bin_dir.mkdir()
    records.mkdir()
    executable(bin_dir / "scontrol", """#!/usr/bin/env bash
if [ "$1 $2" = "show hostnames" ]; then
  [ "$3" = "gpu[07-08]" ] || { echo "unexpected node list $3" >&2; exit 1; }
  printf 'gpu07\\ngpu08\\n'
elif [ "$1" = requeue ]; then
  echo "$2" > "$RECORDS/requeued"
fi
""")
    executable(bin_dir / "srun", """#!/usr/bin/env bash
while [[ "$1" == --* ]]; do shift; done
pids=()
for task in 0 1; do SLURM_PROCID=$task "$@" & pids+=($!); done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" && code=0 || code=$?
  if [ "$code" -gt "$status" ]; then status=$code; fi
done
exit "$status"
""")
    python = executable(bin_dir / "python", f"""#!{sys.executable}
import json, os, sys
if sys.argv[1:3] == ["-m", "trainers.wmt"]:
    with open(os.path.join(os.environ["RECORDS"], os.environ["SLURM_PROCID"] + ".json"), "w") as f:
        json.dump({{"TF_CONFIG": os.environ.get("TF_CONFIG"), "args": sys.argv[3:]}}, f)
    sys.exit(int(os.environ["TRAINER_STATUS"]))
os.execv({sys.executable!r}, [{sys.executable!r}] + sys.argv[1:])
""")

    def submit(*args, trainer_status=0):
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHON=python,
                   RECORDS=str(records), SLURM_JOB_NODELIST="gpu[07-08]", SLURM_JOB_ID="4242",
                   TRAINER_STATUS=str(trainer_status))
        result = subprocess.run(["bash", os.path.join(LAUNCH, "slurm.sbatch"), *args], cwd=ROOT,
                                env=env, capture_output=True, text=True, timeout=120)
        tasks = {}
        for name in sorted(os.listdir(records)):
            if name.endswith(".json"):
                with open(records / name) as stream:
                    tasks[int(name[:-5])] = json.load(stream)
        requeued = (records / "requeued").read_text().strip() if (
            records / "requeued").exists() else None
        return result, tasks, requeued

    return submit


def test_slurm_script_starts_one_worker_per_node_with_its_tf_config(slurm):
    result, tasks, requeued = slurm("--train_steps=10")
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(tasks) == [0, 1] and requeued is None
    for index, task in tasks.items():
        assert resolve(task["TF_CONFIG"]) == ({"worker": ["gpu07:2222", "gpu08:2222"]}, "worker",
                                              index)
        flags = wmt_flags(task["args"])
        assert flags["strategy"] == "multi_worker_mirrored"
        assert flags["model_dir"] == "runs/slurm" and flags["train_steps"] == 10
        assert flags["dataset"] == "wmt14_en_de"


@pytest.mark.parametrize("status", [143, 138])
def test_slurm_script_requeues_a_job_stopped_by_sigterm_or_a_lost_worker(slurm, status):
    result, tasks, requeued = slurm(trainer_status=status)
    assert result.returncode == status and sorted(tasks) == [0, 1]
    assert requeued == "4242"


def test_slurm_script_does_not_requeue_an_error(slurm):
    result, _, requeued = slurm(trainer_status=1)
    assert result.returncode == 1 and requeued is None


def test_slurm_script_asks_for_the_signal_and_the_requeue():
    with open(os.path.join(LAUNCH, "slurm.sbatch")) as stream:
        options = [line[len("#SBATCH --"):].strip().split("=", 1)
                   for line in stream if line.startswith("#SBATCH --")]
    directives = {option[0]: option[1] if len(option) > 1 else True for option in options}
    assert directives["ntasks-per-node"] == "1"
    # SIGTERM to every task (no "B:", which would signal the batch shell only) before the limit.
    signal_name, seconds = directives["signal"].split("@")
    assert signal_name == "TERM" and int(seconds) > 0
    assert directives["requeue"] is True


# --- Kubernetes (Kubeflow TFJob) ----------------------------------------------------------------

def test_tfjob_manifest_runs_restartable_workers_on_a_shared_volume():
    with open(os.path.join(LAUNCH, "tfjob.yaml")) as stream:
        job = yaml.safe_load(stream)
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "TFJob"
    replicas = job["spec"]["tfReplicaSpecs"]
    assert set(replicas) <= {"Chief", "Worker", "PS", "Evaluator"}
    worker = replicas["Worker"]
    assert isinstance(worker["replicas"], int) and worker["replicas"] >= 2
    # ExitCode: the operator restarts a pod that exited 143 (SIGTERM, a checkpoint saved) or 138
    # (its own retryable code: a worker was lost) and fails the job on 1 or 2 (an error, a bad flag).
    assert worker["restartPolicy"] == "ExitCode"
    pod = worker["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 60
    # The operator sets TF_CONFIG in the container named "tensorflow" and opens its "tfjob-port".
    (container,) = [c for c in pod["containers"] if c["name"] == "tensorflow"]
    assert {"name": "tfjob-port", "containerPort": 2222} in container["ports"]
    assert container["command"][-2:] == ["-m", "trainers.wmt"]
    flags = wmt_flags(container["args"])
    assert flags["strategy"] == "multi_worker_mirrored"
    claims = {v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    shared = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in claims]
    for name in ("model_dir", "data_dir"):
        assert any(flags[name].startswith(path.rstrip("/") + "/") for path in shared), name
