"""tidelog's web console (issue 28): ``tidelog console`` and ``tidelog serve --console``.

Rooms: :mod:`.kafka` (the one way to a cluster: the Kafka protocol), :mod:`.search` (cancellable search jobs),
:mod:`.audit` (who changed what), :mod:`.sessions` (login, CSRF), :mod:`.app` (the Starlette routes), :mod:`.command`
(``tidelog console``), ``static/``
(the page: plain JS and CSS, shipped as package data, no CDN).
"""
