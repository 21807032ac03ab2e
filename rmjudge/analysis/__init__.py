"""What users do with a judged table: evaluate it against gold labels (`metrics`), look at the
judge's biases (`report`), write a cleaned preference dataset (`filter`), and judge pairs from
TRL (`trl_judge`). Everything reads a judged output through `tables.open_judged`.
"""
