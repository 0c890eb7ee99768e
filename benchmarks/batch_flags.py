"""Flags of the benchmarks that time training steps on real batches (training_throughput,
profile_step): which presets and precisions, and how many batches of which data."""

from absl import flags

from trainers import data_flags

flags.adopt_module_key_flags(data_flags)
# Batches of the size the presets' speed is reported at, not the trainer's defaults.
flags.FLAGS.set_default("token_budget", 4096)
flags.FLAGS.set_default("max_length", 64)
flags.DEFINE_list("presets", ["small", "base"], "Presets to measure.")
flags.DEFINE_list("precisions", ["float32", "bfloat16"], "Compute precisions (float32, bfloat16).")
flags.register_validator("precisions", lambda values: set(values) <= {"float32", "bfloat16"},
                         "must name float32 or bfloat16 only")
flags.DEFINE_integer("batches", 8, "Real batches spread over the training set's first pass; 0: "
                     "all of them (the padding and shapes training sees).", lower_bound=0)
