"""Publishing a dataset written by `rmjudge filter` on the Hugging Face Hub.

- `record`: what a filter run knew about its dataset (source, judge, settings, counts, eval
  figures), kept in a hidden file beside the export so that `rmjudge push` can describe it later;
- `card`: the dataset card (README.md with YAML front matter) made from that record;
- `hub`: the upload folder (data file + card) and the push itself (`huggingface_hub`, the
  `[hub]` extra).
"""
