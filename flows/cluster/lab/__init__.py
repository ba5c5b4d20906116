"""Lab hosts: network-namespace hosts with sshd (and private Docker daemons) on one machine."""
