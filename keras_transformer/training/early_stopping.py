"""Early stopping: end training after ``patience`` dev evaluations without improvement (fairseq's
``--patience``, OpenNMT-tf's ``early_stopping``).

    stopper = EarlyStopping(patience=3, metric="bleu", min_delta=0.1)
    for step, bleu in evaluations:
        if stopper.update(bleu, step):
            break                     # stopper.describe() says why

An evaluation improves when its value beats the best so far by more than ``min_delta`` (higher
BLEU, lower loss); the first finite value always does. A NaN (a dev BLEU that failed) is an
evaluation without improvement. ``state()`` and ``EarlyStopping(..., state=...)`` carry the
count over a resume (the trainer keeps it in the run's summary).
"""

import math
from typing import Optional

# metric -> +1 if higher is better, -1 if lower is better; the key the dev logs hold it under.
METRICS = {"bleu": 1.0, "loss": -1.0}


class EarlyStopping:
    def __init__(self, patience: int, metric: str = "loss", min_delta: float = 0.0,
                 state: Optional[dict] = None):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"early_stopping_patience must be a positive integer, got {patience!r}.")
        if metric not in METRICS:
            raise ValueError(f"early_stopping_metric must be one of {sorted(METRICS)}, got "
                             f"{metric!r}.")
        if not (isinstance(min_delta, (int, float)) and math.isfinite(min_delta)
                and min_delta >= 0):
            raise ValueError(f"early_stopping_min_delta must be a finite number >= 0, got "
                             f"{min_delta!r}.")
        self.patience, self.metric, self.min_delta = patience, metric, float(min_delta)
        self.best: Optional[float] = None
        self.best_step: Optional[int] = None
        self.bad_evaluations = 0
        # Only a state of the same metric means anything here (a changed patience or min_delta
        # applies from now on).
        if state and state.get("metric") == metric:
            self.best = state.get("best")
            self.best_step = state.get("best_step")
            self.bad_evaluations = int(state.get("evaluations_without_improvement") or 0)

    def improves(self, value: float) -> bool:
        if value is None or not math.isfinite(value):
            return False
        if self.best is None:
            return True
        return METRICS[self.metric] * (value - self.best) > self.min_delta

    def update(self, value: float, step: Optional[int] = None) -> bool:
        """Records one evaluation's value; returns whether training should stop now."""
        if self.improves(value):
            self.best, self.best_step, self.bad_evaluations = float(value), step, 0
        else:
            self.bad_evaluations += 1
        return self.should_stop

    @property
    def should_stop(self) -> bool:
        return self.bad_evaluations >= self.patience

    def state(self) -> dict:
        return {"metric": self.metric, "patience": self.patience, "min_delta": self.min_delta,
                "best": self.best, "best_step": self.best_step,
                "evaluations_without_improvement": self.bad_evaluations}

    def describe(self) -> str:
        """E.g. ``dev bleu did not improve by more than 0 for 3 evaluations (patience 3); best
        12.31 at step 2000``."""
        best = ("no finite value yet" if self.best is None
                else f"best {self.best:.4g} at step {self.best_step}")
        return (f"dev {self.metric} did not improve by more than {self.min_delta:g} for "
                f"{self.bad_evaluations} evaluation(s) (patience {self.patience}); {best}")
