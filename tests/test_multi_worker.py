"""Several workers (MultiWorkerMirroredStrategy, TF_CONFIG), as two processes on this machine:
preemption (a SIGTERM to one worker or to all stops them all at one step with a checkpoint, and the
same command resumes to the weights an uninterrupted job reaches), a worker killed outright (the
others exit with a status a scheduler retries), outputs written by the chief alone, workers that
must start from the same weights, and shards of very different sizes.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from toy import write_word_for_word_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = os.path.join(ROOT, "tests", "training_subprocess.py")
TIMEOUT = 300  # seconds for a job of two workers: a hang fails instead of blocking the suite


def tf_configs(count=2):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    workers = [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    for s in sockets:
        s.close()
    return [json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})
            for i in range(count)]


def environment(tf_config, **extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, TF_CONFIG=tf_config)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Toy TSV files and their vocabulary, prepared once before any worker starts (as a cluster
    user prepares the data before launching: workers would otherwise all learn it)."""
    folder = tmp_path_factory.mktemp("corpus")
    write_word_for_word_corpus(folder)
    data = [f"--train_data={folder / 'train.tsv'}", f"--dev_data={folder / 'dev.tsv'}",
            f"--data_dir={folder / 'data'}", "--vocab_size=296", "--max_length=16"]
    result = subprocess.run([sys.executable, "-m", "trainers.prepare_data", "--dataset=files",
                             *data], cwd=ROOT, env=environment("", TF_CONFIG=""),
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-2000:]
    return data


class Job:
    """``python -m trainers.wmt`` on two workers (the first ``len(per_worker_args)`` of them are
    started); each one's output goes to a file."""

    def __init__(self, folder, corpus, per_worker_args, tmpdirs=None):
        self.logs = [folder / f"worker{i}.log" for i in range(2)]
        self.processes = []
        self.configs = tf_configs()
        for index, (config, args) in enumerate(zip(self.configs, per_worker_args)):
            extra = {"TMPDIR": str(tmpdirs[index])} if tmpdirs else {}
            command = [sys.executable, "-m", "trainers.wmt", "--preset=tiny", "--dataset=files",
                       *corpus, "--token_budget=256", "--strategy=multi_worker_mirrored",
                       "--deterministic", "--log_every_steps=1", *args]
            with open(self.logs[index], "w") as log:
                self.processes.append(subprocess.Popen(command, cwd=ROOT, stdout=log,
                                                       stderr=subprocess.STDOUT,
                                                       env=environment(config, **extra)))

    def output(self, index):
        return self.logs[index].read_text()

    def wait_for(self, index, pattern):
        self._wait_until(index, lambda: re.search(pattern, self.output(index), re.M),
                         f"no {pattern!r}")

    def wait_for_address(self, index):
        """Until worker ``index``'s own TF_CONFIG address takes connections."""
        host, port = json.loads(self.configs[index])["cluster"]["worker"][index].rsplit(":", 1)

        def answers():
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return True
            except OSError:
                return False

        self._wait_until(index, answers, f"nothing listens at {host}:{port}")

    def _wait_until(self, index, done, failure):
        deadline = time.monotonic() + TIMEOUT
        while not done():
            assert all(p.poll() is None for p in self.processes), self.output(index)[-3000:]
            assert time.monotonic() < deadline, f"{failure}: " + self.output(index)[-3000:]
            time.sleep(0.2)

    def finish(self):
        statuses = []
        for process in self.processes:
            try:
                statuses.append(process.wait(timeout=TIMEOUT))
            except subprocess.TimeoutExpired:
                for p in self.processes:
                    p.kill()
                pytest.fail("the workers hung:\n" + "".join(
                    self.output(i)[-2000:] for i in range(len(self.processes))))
        return statuses


def model_weights(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith("model_variables/")}


@pytest.mark.slow
def test_sigterm_to_one_worker_stops_both_at_one_step_and_the_job_resumes_there(tmp_path, corpus):
    # Stopped near step 5 (a loaded machine may run a few more before the signal lands, hence
    # the margin), the job resumes for 40-odd steps: a wrong data position, learning rate or
    # optimizer state after the resumption moves the weights far beyond the tolerance below.
    steps = 50
    shared = [f"--model_dir={tmp_path / 'run'}", f"--train_steps={steps}", "--dev_every_steps=0",
              "--dev_bleu_sentences=0", "--checkpoint_every_minutes=60"]
    job = Job(tmp_path, corpus, [shared, shared])
    job.wait_for(1, r"step 5/")
    job.processes[1].send_signal(signal.SIGTERM)
    statuses = job.finish()
    outputs = [job.output(0), job.output(1)]
    # Both stopped, saved and exited with the status a scheduler retries (128 + SIGTERM).
    assert statuses == [143, 143], outputs[0][-2000:] + outputs[1][-2000:]
    stopped = [int(re.search(r"step (\d+): training stopped \(sigterm\)", o).group(1))
               for o in outputs]
    assert stopped[0] == stopped[1] < steps
    assert "stopped by SIGTERM (sent to another worker of the job)" in outputs[0]
    for index, output in enumerate(outputs):  # said before each waited for the other to start
        assert f"wmt: worker {index} of 2 (TF_CONFIG): waiting until every worker has started" in output
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith(f"ckpt-{stopped[0]}")

    # The same command on both resumes from that step and ends where an uninterrupted job does.
    resumed = Job(tmp_path, corpus, [shared, shared])
    assert resumed.finish() == [0, 0], resumed.output(0)[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["start_step"] == stopped[0] and summary["steps"] == steps
    reference = [f"--model_dir={tmp_path / 'reference'}", *shared[1:]]
    uninterrupted = Job(tmp_path, corpus, [reference, reference])
    assert uninterrupted.finish() == [0, 0], uninterrupted.output(0)[-3000:]
    ours, theirs = (model_weights(tmp_path / run / f"ckpt-{steps}") for run in ("run", "reference"))
    assert ours.keys() == theirs.keys() and ours
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_a_lost_worker_ends_the_job_retryably_and_a_sigterm_to_all_stops_them_together(
        tmp_path, corpus, system_temporary):
    shared = [f"--model_dir={tmp_path / 'run'}", "--train_steps=100000", "--dev_every_steps=0",
              "--dev_bleu_sentences=0", "--checkpoint_every_steps=3"]
    # A killed worker cannot remove its temporary files (autograph's code, a scratch save): they
    # go to a folder of the test's own, not the system's.
    job = Job(tmp_path, corpus, [shared, shared], [system_temporary] * 2)
    job.wait_for(1, r"step 5/")
    job.processes[1].kill()  # SIGKILL: no chance to save; the survivor learns it in a collective
    statuses = job.finish()
    assert statuses[0] == 138, job.output(0)[-3000:]  # what Kubeflow retries, not a failure
    last = job.output(0).strip().splitlines()[-1]
    assert last.startswith("wmt: error: another worker of the job is gone, after step ")
    # the lost worker named when TensorFlow names it, never TensorFlow's empty first line
    assert "Graph execution error" not in last
    if "tasks are unhealthy" in job.output(0):
        assert "(/job:worker/replica:0/task:1: stopped sending heartbeats)" in last, last
    assert "Traceback" not in job.output(0)
    saved = int(tf.train.latest_checkpoint(str(tmp_path / "run")).rsplit("-", 1)[1])
    assert saved >= 3

    # The same command resumes from that checkpoint; a SIGTERM to every worker stops them together.
    again = Job(tmp_path, corpus, [shared, shared])
    again.wait_for(0, rf"step {saved + 3}/")
    for process in again.processes:
        process.send_signal(signal.SIGTERM)
    assert again.finish() == [143, 143]
    stopped = {int(re.search(r"step (\d+): training stopped \(sigterm\)", again.output(i)).group(1))
               for i in range(2)}
    assert len(stopped) == 1
    step = stopped.pop()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["start_step"] == saved and summary["steps"] == step
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith(f"ckpt-{step}")


@pytest.mark.slow
def test_a_worker_whose_peer_never_starts_stops_at_once_on_sigterm_or_ctrl_c(tmp_path, corpus):
    # Signalled once its address answers: then it waits for its peer, and a worker that went
    # straight into TensorFlow's join would be held there (Python's interpreter lock taken,
    # SIGTERM's handler replaced) for good.
    for signum in (signal.SIGTERM, signal.SIGINT):
        run = tmp_path / signum.name
        job = Job(tmp_path, corpus, [[f"--model_dir={run}"]])
        job.wait_for(0, r"waiting until every worker has started")
        job.wait_for_address(0)
        time.sleep(1)
        sent = time.monotonic()
        job.processes[0].send_signal(signum)
        assert job.finish() == [128 + signum], job.output(0)[-3000:]
        assert time.monotonic() - sent < 30
        output = job.output(0)
        assert output.strip().splitlines()[-1] == (
            f"wmt: error: stopped by {signum.name}; what was complete is kept, nothing "
            "half-written is left")
        assert "Traceback" not in output
        assert not run.exists() or not files_below(run)


def files_below(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, names in os.walk(folder) for f in names)


@pytest.mark.slow
def test_only_the_chief_writes_and_workers_must_share_its_model_dir(tmp_path, corpus):
    """Worker 1 gets a --model_dir and --export_dir of its own: nothing may reach them (on a cluster
    they would be the same shared folders), and no temporary folder of either worker remains."""
    tmpdirs = [tmp_path / "tmp0", tmp_path / "tmp1"]
    for folder in tmpdirs:
        folder.mkdir()

    def args(index, steps):
        return [f"--model_dir={tmp_path / f'run{index}'}", f"--export_dir={tmp_path / f'export{index}'}",
                f"--train_steps={steps}", "--dev_every_steps=4", "--dev_bleu_sentences=4",
                "--checkpoint_every_steps=4", "--average_last=2", "--keep_best_bleu",
                "--export_best"]

    job = Job(tmp_path, corpus, [args(0, 8), args(1, 8)], tmpdirs)
    assert job.finish() == [0, 0], job.output(0)[-3000:] + job.output(1)[-3000:]
    chief = files_below(tmp_path / "run0")
    for expected in ("ckpt-8.index", "config.json", "summary.json", "vocab.model",
                     os.path.join("averaged", "ckpt.index"), os.path.join("best", "ckpt.index")):
        assert expected in chief, chief
    assert [f for f in chief if f.startswith("train" + os.sep + "events.out.tfevents")]
    assert [f for f in chief if f.startswith("dev" + os.sep + "events.out.tfevents")]
    assert len(os.listdir(tmp_path / "run0" / "best_export")) == 1
    assert os.listdir(tmp_path / "export0")
    assert "dev BLEU" in job.output(0) and "dev BLEU" not in job.output(1)
    assert "summary in" in job.output(0) and "summary in" not in job.output(1)
    assert files_below(tmp_path / "run1") == [] and files_below(tmp_path / "export1") == []
    assert os.listdir(tmpdirs[0]) == [] and os.listdir(tmpdirs[1]) == []

    # Restarted, the chief resumes from step 8 but worker 1 finds no checkpoint in its folder:
    # one clear error on both, not a hang and not a silent divergence.
    restarted = Job(tmp_path, corpus, [args(0, 12), args(1, 12)], tmpdirs)
    assert restarted.finish() == [1, 1]
    for index in range(2):
        last = restarted.output(index).strip().splitlines()[-1]
        assert last.startswith("wmt: error: the workers do not start from the same step and "
                               "weights (the chief's step: 8)"), restarted.output(index)[-2000:]


@pytest.mark.slow
def test_uneven_shards_take_the_same_steps_without_hanging(tmp_path):
    processes = [subprocess.Popen([sys.executable, CHILD, "uneven", str(tmp_path / f"{i}.json"),
                                   str(tmp_path / "model")], env=environment(config),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for i, config in enumerate(tf_configs())]
    for process in processes:
        try:
            output, _ = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            pytest.fail("the workers hung on uneven shards")
        assert process.returncode == 0, output[-3000:]
    summaries = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    assert [s["steps"] for s in summaries] == [12, 12]
    # The dev loss of the job is that of all dev examples of both shards, on each worker.
    for summary in summaries:
        assert summary["final_dev_loss"] == pytest.approx(summary["dev_loss_alone"], rel=1e-5)
