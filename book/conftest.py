"""nbval over book/ executes the chapters only.

The coursework is checked by tests/test_assignments.py instead: the masters in
assignments/ are otter-grader sources, and the student notebooks in coursework/ have
blanks (``...``) by design.
"""
collect_ignore = ["assignments", "coursework"]
