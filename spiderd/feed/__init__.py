"""Items and feeds: the in-process items writer, feed files shipped over FTP or to a directory, and the
feed's Spark schema."""
