"""Scoring shared by the simulator and the live loop: scorecards, timelines, percentiles and the report.

``ebb simulate`` (:mod:`ebb.sim`) and ``ebb demo --live`` (:mod:`ebb.demo`) both sit above this
package and fill the same records (:mod:`ebb.score.results`), so a live run and a simulated one
print and plot alike (:mod:`ebb.score.report`). Pure: numpy and the standard library, no I/O except
:func:`ebb.score.report.write_report`, which writes the HTML file it is asked for.
"""
