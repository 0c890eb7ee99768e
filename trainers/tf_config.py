"""Prints the TF_CONFIG of one worker of a multi-worker training job, from the list of its workers.

    export TF_CONFIG=$(python -m trainers.tf_config --workers=node1:2222,node2:2222 --index=0)
    python -m trainers.wmt --strategy=multi_worker_mirrored --model_dir=/shared/runs/base ...

Every worker gets the same --workers (host:port, in the same order) and its own --index; worker 0
is the chief, the one that writes checkpoints, summaries, dev BLEU and exports to --model_dir.
Launch files that call it: trainers/launch/slurm.sbatch (Slurm); on Kubernetes, Kubeflow's TFJob
(trainers/launch/tfjob.yaml) sets TF_CONFIG itself. See docs/training.md, "Several machines".
"""

import json

from absl import app, flags

from . import console

flags.DEFINE_list("workers", None, "The job's workers as host:port,host:port,... (the same list "
                  "on every worker; the first is the chief).")
flags.DEFINE_integer("index", None, "This worker's position in --workers, from 0.")
flags.mark_flags_as_required(["workers", "index"])

FLAGS = flags.FLAGS


def main(argv):
    from keras_transformer.training.strategy import tf_config

    try:
        config = tf_config(FLAGS.workers, FLAGS.index)
    except ValueError as error:
        flag = "index" if str(error).startswith("index") else "workers"
        raise app.UsageError(f"--{flag}: {error}") from None
    print(json.dumps(config, separators=(",", ":")))


if __name__ == "__main__":
    console.run(main)
