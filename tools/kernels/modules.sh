#!/usr/bin/env bash
# modules.sh VERSION: packs the kernel modules the tests need, with their
# dependencies, into $KERNELS_CACHE/VERSION/modules.cpio: /lib/modules/*.ko
# (decompressed: busybox insmod reads plain .ko) and /modules.list, the
# order init.sh loads them in (dependencies first). A module built into
# the kernel (=y in its config) needs nothing.
set -euo pipefail
. "$(dirname "$0")/common.sh"

ver=${1:?usage: modules.sh 5.10|6.1|6.12|6.12-arm64}
kroot=$KERNELS_CACHE/$ver/root
config=$(ls "$kroot"/boot/config-*)
moddir=
for d in "$kroot"/lib/modules/* "$kroot"/usr/lib/modules/*; do
	[[ -d $d/kernel ]] && moddir=$d && break
done
[[ -n $moddir ]] || die "$ver: no modules in $kroot"

# veth, tbf and netem: the tcp tests' links; tcp_diag, mptcp_diag: socket diag, how
# the tcp collector lists a server's sockets (a host loads it on demand
# through modprobe, which the VM has not); xfrm_user: the netlink handle
# of a namespace opens every netlink family, XFRM and netfilter too; loop: the block tests' devices;
# virtio: the VM's devices (none used now, loaded when modular).
want=(veth sch_tbf sch_netem tcp_diag mptcp_diag xfrm_user nfnetlink loop virtio_pci virtio_blk virtio_net)
declare -A cfg=([veth]=VETH [sch_tbf]=NET_SCH_TBF [sch_netem]=NET_SCH_NETEM [tcp_diag]=INET_TCP_DIAG [mptcp_diag]=INET_MPTCP_DIAG [xfrm_user]=XFRM_USER [nfnetlink]=NETFILTER_NETLINK
	[loop]=BLK_DEV_LOOP [virtio_pci]=VIRTIO_PCI [virtio_blk]=VIRTIO_BLK [virtio_net]=VIRTIO_NET)

# name -> file, names with "-" as "_" (as the kernel spells them).
declare -A path
while read -r f; do
	n=$(basename "$f")
	n=${n%%.ko*}
	path[${n//-/_}]=$f
done < <(find "$moddir/kernel" -name '*.ko*')

out=$KERNELS_CACHE/$ver/modules
rm -rf "$out"
mkdir -p "$out/lib/modules"
: >"$out/modules.list"
declare -A done_
# add NAME: its dependencies (modinfo's depends=), then itself.
add() {
	local n=${1//-/_} f d
	[[ -n ${done_[$n]:-} ]] && return
	done_[$n]=1
	f=${path[$n]:-}
	[[ -n $f ]] || die "$ver: module $n not found"
	local dst=$out/lib/modules/$n.ko
	case $f in
	*.ko.xz) xz -dc "$f" >"$dst" ;;
	*.ko.zst) zstd -qdc "$f" >"$dst" ;;
	*.ko.gz) gzip -dc "$f" >"$dst" ;;
	*) cp "$f" "$dst" ;;
	esac
	for d in $(modinfo -F depends "$dst" | tr ',' ' '); do
		add "$d"
	done
	echo "/lib/modules/$n.ko" >>"$out/modules.list"
}
for m in "${want[@]}"; do
	state=$(grep -E "^CONFIG_${cfg[$m]}=" "$config" | cut -d= -f2 || true)
	case $state in
	y) log "$ver: $m built in" ;;
	m) add "$m" ;;
	*) log "$ver: $m not in the kernel (CONFIG_${cfg[$m]} unset)" ;;
	esac
done
log "$ver: modules: $(xargs -n1 basename <"$out/modules.list" | tr '\n' ' ')"
(cd "$out" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$KERNELS_CACHE/$ver/modules.cpio"
