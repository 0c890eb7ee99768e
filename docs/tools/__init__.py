"""The programs that make the docs: the pictures of docs/images (``python -m docs.tools.figures``)
and the learning curves of training runs (``python -m docs.tools.learning_curve``)."""
