"""What the utility and text-quality audits score with: one tokeniser, one fit, one AUC."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

#: Word tokens that keep decimals and hyphenated categories whole ("37.1", "walk-in").
TOKEN_PATTERN = r"(?u)\w+(?:[.\-]\w+)*"


def macro_ovr_auc(y_test: np.ndarray, proba: np.ndarray | None, model_classes: Sequence[Any],
                  classes: Sequence[Any]) -> dict[str, Any]:
    """Mean over classes present in the test set (with both outcomes) of the one-vs-rest
    AUC; a class the model never saw gets a constant score (AUC 0.5)."""
    per_class: dict[str, float] = {}
    col = {c: i for i, c in enumerate(model_classes)}
    for c in classes:
        pos = y_test == c
        if pos.all() or not pos.any():
            continue
        score = (proba[:, col[c]] if proba is not None and c in col
                 else np.zeros(len(y_test)))
        per_class[str(c)] = float(roc_auc_score(pos, score))
    macro = float(np.mean(list(per_class.values()))) if per_class else None
    return {"macro_auc": macro, "per_class_auc": per_class}


def fit_predict(model: Any, x_train: Any, y_train: np.ndarray,
                x_test: Any) -> tuple[np.ndarray | None, list[Any]]:
    """Fit and predict class probabilities; (None, []) when the training set has one
    class (nothing to learn)."""
    if len(np.unique(y_train)) < 2:  # nothing to learn: constant scores
        return None, []
    model.fit(x_train, y_train)
    return model.predict_proba(x_test), list(model.classes_)
