"""The updater's mutating admission webhook (``podtailor-updater webhook``): new pods start at the VPA target.

Layout: ``mutation`` (pure: a new pod's containers and its VPA target in, one decision out, through the
updater's own planner helpers), ``review`` (AdmissionReview JSON in, response with a JSONPatch out; fails
open), ``cache`` (VPAs, ReplicaSets, Jobs, LimitRanges and HPAs listed in the background; admission reads
only memory), ``tls`` (self-managed CA and serving certificate, or mounted files, with rotation),
``register`` (the MutatingWebhookConfiguration), ``server`` (HTTPS endpoints), ``metrics`` and ``cli``.
"""
