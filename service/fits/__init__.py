"""The API's side of fits over HTTP (docs/fits.md): uploads checked and normalised, jobs queued, read and
cancelled in the job store (fitstore), the store's fit metrics at each scrape. Workers fit
(`python -m training worker`); nothing here imports torch or `training/`."""
