"""The one exception type for mistakes a user can fix (bad flags, paths, data).

`sharedbert.main` prints a UserError as one line (what, where, what to do) and exits 2,
without a traceback unless --verbose is given. Everything else is a bug and keeps its
traceback.
"""


class UserError(Exception):
  """A problem with the user's input, explained in one line."""
