"""The lab: the reproduction apparatus built on the federated-learning library (docs/design.md, "Layers").

``sweep`` runs settings x seeds, ``report`` turns run directories into tables and plots, ``claims`` states and
judges the papers' claims, ``tuning`` searches hyperparameters before a claim's evaluation seeds run.
"""
