"""Multi-probe managed collisions (TorchRec path `torchrec.modules.hash_mc_modules`)."""

from shardrec_embedding.mc import HashZchManagedCollisionModule

__all__ = ["HashZchManagedCollisionModule"]
