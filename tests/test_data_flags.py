"""The shared data flags: the bucket grid follows --xla unless given, and bad values name the flag."""

import pytest
from absl import app, flags

from trainers import data_flags


@pytest.fixture
def parse():
    def parse(*argv):
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["prog", *argv])
    yield parse
    flags.FLAGS.unparse_flags()


def test_bucket_grid_follows_xla_unless_given(parse):
    parse()
    assert data_flags.data_config(xla=False).bucket_multiple == 1  # least padding
    assert data_flags.data_config(xla=True).bucket_multiple == 8  # few shapes to compile
    parse("--bucket_multiple=4")
    assert data_flags.data_config(xla=False).bucket_multiple == 4
    assert data_flags.data_config(xla=True).bucket_multiple == 4


def test_a_bad_value_names_its_flag(parse):
    parse("--bucket_multiple=0")  # not silently replaced by the default
    with pytest.raises(app.UsageError, match=r"--bucket_multiple=0: must be in 1\.\.64"):
        data_flags.data_config()
