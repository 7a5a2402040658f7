"""``python -m submarine_elastic.daemon``: what ``submarine controller start`` runs in the background."""

from submarine_elastic.daemon.serve import serve

serve(prog_name="python -m submarine_elastic.daemon")
