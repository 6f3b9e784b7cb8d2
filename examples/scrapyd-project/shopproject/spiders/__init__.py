"""One spider per spiderd site; its name is the site's name and the ``[batch] spider`` of the frontier."""
