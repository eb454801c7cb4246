"""CMP, the Cerememory Protocol: the operation table (`operations`), its messages and errors, the
one dispatcher every entry point runs operations through (`dispatch`), the engine as the
dispatcher sees it (`handler`), and the request pieces every client builds alike (`build`)."""
