"""Pre-filter words shared by the rules on the device-flow model.

A device bug needs two devices, and a file that names a second device says
`cuda` (`'cuda:1'`, `.cuda(1)`, `torch.device('cuda', 1)`), gives an integer
index (`.to(1)`), or uses a list of `devices` or a `DEVICE...` constant
imported from a config module. The bare word `device` is not enough on its
own: it is in most modeling files of any library and would parse them all for
nothing (transformers: 71 of 2,658 model files contain `cuda`).
"""

FLOW_WORDS = ("cuda", "devices", "DEVICE", ".to(1", ".to(2", ".to(3")
