"""Converting the original checkpoint and writing it back (installed package only): the original format and its
reader, the converted repo's files, the numeric verification, the export, folders written whole."""
