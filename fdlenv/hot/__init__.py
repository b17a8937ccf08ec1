"""The hot commands' memo: the replay (`replay`, os only) and its writer (`memo`).
"""
