# %% [markdown]
# # selpe-audit in a notebook
# The whole flow on fictional demo rows (docs/api.md): the steward releases a DataFrame
# inside the enclave, a reviewer approves the artifact, an analyst opens it off-site with
# the keys they trust and samples records, and the auditor compares them with real rows.
# Open it with jupytext (`jupytext --to notebook examples/notebook.py`) or run it as a
# script (`python examples/notebook.py`).

# %%
import polars as pl

import selpe_audit
from selpe_audit.demo.generator import generate_rows
from selpe_audit.schema import demo_schema_path

schema = demo_schema_path()
real = pl.DataFrame(generate_rows(400, seed=1))        # the rows the release reads
held_out = pl.DataFrame(generate_rows(400, seed=2))    # rows it never reads (the audit's)
key, release_pub, _ = selpe_audit.generate_keypair("keys/release.pem")
reviewer_key, reviewer_pub, _ = selpe_audit.generate_keypair("keys/reviewer.pem")

# %% Inside the enclave: one release, charged to the lifetime ledger
rel = selpe_audit.release(real, schema, epsilon=2.0, key=key, out="out/release",
                          dataset="ed_triage", lifetime_ledger="out/ledger")
print(rel.guarantee.statements[0])
rel  # noqa: B018 - in Jupyter: the review's summary and guarantee

# %% The reviewer has read every number (`selpe-audit review out/release`) and approves
selpe_audit.approve(rel.path, key=reviewer_key, release_key=release_pub)

# %% Off-site: verify with the keys you trust, then sample (no further privacy cost)
artifact = selpe_audit.open_artifact("out/release", release_key=release_pub,
                                     trust=[reviewer_pub], require_approvals=1)
synthetic = artifact.sample(1000, decoder="model", seed=0).to_pandas()
print(synthetic.head())

# %% Back in the enclave: train on synthetic, test on real (and the rest of the report)
report = selpe_audit.audit_report(synthetic, real, held_out, schema, artifact="out/release",
                                  trust=[release_pub], sdmetrics=False)
tstr = report.metrics["utility"]["models"]["hgb_native"]
print(f"TSTR macro AUC (hgb_native): synthetic {tstr['synthetic']['macro_auc']:.3f}, "
      f"real {tstr['real_sample']['macro_auc']:.3f}")
report.write_html("out/report.html")
