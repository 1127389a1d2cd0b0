"""The HTML report: one self-contained page of the devices, the modules placed on them, the
crossings between them, memory against capacity, the findings and the transfers' timeline.

placement.py records which module sits on which device while the model is alive; model.py
turns a report (the json report's dict plus the placement) into the page's plain data; render.py
writes that data into one HTML file with page.css and page.js inlined."""
