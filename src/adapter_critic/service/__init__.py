"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The service layer, between the HTTP layer and the pipeline, knowing nothing of HTTP: the composition root
(`compose`: every part of a service built from its config), the chat service (`chat`: a decoded request and its
caller in, its run out), the admission of requests (`admission`) and who may call (`keys`)."""
