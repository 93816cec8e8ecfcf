"""Generic infrastructure every layer shares: typed config validation (``schema``), locks and
atomic files (``files``), the console and progress lines (``progress``). It imports no other
package of the project."""
