"""mpi4py's MPI.COMM_SELF.Spawn: each parent rank spawns 3 copies of this script on its own;
the children gather rank*10 to the parent over the intercommunicator and both sides
disconnect. The parent prints "parent R got [0, 10, 20]"."""
import sys

from mpi4py import MPI

parent = MPI.Comm.Get_parent()
if parent == MPI.COMM_NULL:
    inter = MPI.COMM_SELF.Spawn(sys.executable, args=[__file__], maxprocs=3)
    vals = inter.gather(None, root=MPI.ROOT)
    inter.Disconnect()
    print("parent", MPI.COMM_WORLD.Get_rank(), "got", sorted(vals))
else:
    parent.gather(MPI.COMM_WORLD.Get_rank() * 10, root=0)
    parent.Disconnect()
