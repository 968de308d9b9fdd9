"""Theory on Mixture-of-Experts in Continual Learning (Li et al.): Algorithm 1 and Figures 2 and 5.

``python -m theory.moe_cl.figures`` reproduces the figures: the gate mechanics of
Algorithm 1 (:mod:`.core`), the synthetic regression of Fig. 2 (:mod:`.synth`), the MNIST
experts of Fig. 5 (:mod:`.mnist`); :mod:`.sweep` maps where Fig. 2's errors reach ~0.
"""
