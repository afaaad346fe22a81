"""OpenDP's ``opendp.prelude`` without the extras the project never uses (scikit-learn,
numpy, ibis, examples): the prelude imports scikit-learn, about 2.8 of the 3.5 seconds it
takes, which every command (and every test that runs one) paid at its start. The same names,
so ``from release.dp import prelude as dp`` reads like OpenDP's documentation."""

# ruff: noqa: F401, F403
import opendp.combinators as c
import opendp.measurements as m
import opendp.transformations as t
from opendp.accuracy import *
from opendp.context import *
from opendp.core import as_array, new_function, new_queryable
from opendp.domains import *
from opendp.extras import mbi, polars
from opendp.extras.polars import dp_len as len
from opendp.measures import *
from opendp.metrics import *
from opendp.mod import *
from opendp.typing import *
