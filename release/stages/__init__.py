"""The release's stages, one module each, in the order `release.pipeline` runs them:

- `prepare`: the public inputs, before any private row (models, candidate source, topic
  codebooks; an output folder that can be written);
- `rows`: read the private rows once and charge their people in the lifetime ledger;
- `sizing`: one DP count of the rows, and the plan sized from it and public facts;
- `phrases`: the DP phrase vocabularies the plan runs, and the rows coded for the counts;
- `counts`: the noisy counts in the configured mode;
- `selection`: the DP selection of exemplars, when the budget gives it a share;
- `document`: the artifact's document, built as records from what the stages released;
- `sign`: the document written as JSON, signed and reviewed.

Each stage that runs a mechanism returns one record of what it released, with its ledger
entries and its `release.spent.Spent`.
"""
