"""The formats generators share: MCQs, timelines, bundles, WAGIBench, goals, roles, labels,
ranking, people."""
