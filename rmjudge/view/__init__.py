"""`rmjudge view`: an offline explorer of a judged table, written as a folder of static files
that any browser opens from disk (docs/view.md).

- `view/data.py`: what the page shows, read from the table as JSON (the list's columns, each
  item's details, the search text);
- `view/ranked.py`: the prompts of a ranked store (`rmjudge rank`): candidates in rank order and
  the results of their comparisons;
- `view/site.py`: the folder: the data files in chunks, the page's assets, placed whole;
- `analysis/view_paths.py`: the default folder beside a table and how an explorer is recognized;
- `view/assets/`: the page itself (`index.html`, `view.js`, `view.css`), hand-written, with
  no dependency and a Content-Security-Policy that loads nothing from outside the folder.
"""
